//! Chat answers as markdown (CommonMark via pulldown-cmark). Model output is
//! untrusted: raw HTML is shown as text, link targets other than http(s), mailto
//! and relative ones become `#`, images become links (nothing is fetched), and
//! fenced code is highlighted by `highlight`.

use pulldown_cmark::{html, CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};

use crate::highlight;

/// A link target safe to put in `href`.
pub fn safe_url(url: &str) -> CowStr<'static> {
    let u = url.trim();
    let scheme_end = u.find([':', '/', '?', '#']);
    let safe = match scheme_end {
        Some(i) if u.as_bytes()[i] == b':' => {
            let scheme = u[..i].to_ascii_lowercase();
            matches!(scheme.as_str(), "http" | "https" | "mailto")
        }
        _ => true,
    };
    CowStr::from(if safe { u.to_string() } else { "#".to_string() })
}

/// Sanitised HTML for a (possibly unfinished) markdown answer.
pub fn render(markdown: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut events: Vec<Event> = Vec::new();
    // (fence language, code so far) while inside a code block.
    let mut code: Option<(String, String)> = None;
    for event in Parser::new_ext(markdown, options) {
        if let Some((lang, text)) = code.as_mut() {
            match event {
                Event::Text(t) => text.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let body = if lang.is_empty() { highlight::escape(text) } else { highlight::highlight_code(lang, text) };
                    let class = lang.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '#')).collect::<String>();
                    events.push(Event::Html(format!("<pre class=\"code\"><code class=\"language-{class}\">{body}</code></pre>\n").into()));
                    code = None;
                }
                _ => {}
            }
            continue;
        }
        let event = match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or("").to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((lang, String::new()));
                continue;
            }
            Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
            Event::Start(Tag::HtmlBlock) | Event::End(TagEnd::HtmlBlock) => continue,
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Link { link_type, dest_url: safe_url(&dest_url), title, id })
            }
            Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Link { link_type, dest_url: safe_url(&dest_url), title, id })
            }
            Event::End(TagEnd::Image) => Event::End(TagEnd::Link),
            e => e,
        };
        events.push(event);
    }
    let mut out = String::with_capacity(markdown.len() * 2);
    html::push_html(&mut out, events.into_iter());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_text() {
        let html = render("Hi <script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n<div onclick=x>y</div>");
        assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<div"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn dangerous_links_are_neutralised_and_images_fetch_nothing() {
        let html = render(
            "[a](javascript:alert(1)) [b](JaVaScRiPt:x) [c](https://example.com/x) [d](/rel) <data:text/html,x> ![e](http://tracker/p.png)",
        );
        assert!(!html.to_lowercase().contains("href=\"javascript:") && !html.contains("href=\"data:"), "{html}");
        assert!(html.contains("href=\"https://example.com/x\"") && html.contains("href=\"/rel\""), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("<a href=\"http://tracker/p.png\">e</a>"), "{html}");
    }

    #[test]
    fn fenced_code_is_highlighted_even_while_unfinished() {
        let html = render("Here:\n\n```python\ndef f():\n    return \"<x>\"\n```\n\n**done**");
        assert!(html.contains("<pre class=\"code\"><code class=\"language-python\">"), "{html}");
        assert!(html.contains("hl-string\">&quot;&lt;x&gt;&quot;"), "{html}");
        assert!(html.contains("<strong>done</strong>"));
        let partial = render("```rust\nfn main");
        assert!(partial.contains("hl-function\">main") || partial.contains("main"), "{partial}");
        assert!(partial.contains("</code></pre>"));
        assert!(render("```\"><script>\nx\n```").contains("language-"), "odd fence info stays inside the class attribute");
        assert!(!render("```\"><script>\nx\n```").contains("<script"));
    }
}
