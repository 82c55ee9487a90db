//! Entry point of the playground: only mounts the root component.

mod components;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(components::app::App);
}
