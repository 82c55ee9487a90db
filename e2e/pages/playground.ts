// Page object of the playground: tests read the page only through these locators.
import { Page, Locator } from '@playwright/test';

export class Playground {
  readonly title: Locator;
  readonly consoleErrors: string[] = [];

  constructor(readonly page: Page) {
    this.title = page.getByTestId('title');
    page.on('console', (msg) => { if (msg.type() === 'error') this.consoleErrors.push(msg.text()); });
    page.on('pageerror', (err) => this.consoleErrors.push(String(err)));
  }

  async open(path = '/') {
    await this.page.goto(path);
  }
}
