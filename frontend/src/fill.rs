//! Fill-in-the-middle in the editor: where the cursor splits the text (browsers count
//! the caret in UTF-16 units), and the output rendered in place between the two parts.

use crate::highlight;

/// The text before and after the caret at `caret` UTF-16 units (past the end: all
/// of it before; inside a surrogate pair: before the pair).
pub fn split_at_caret(text: &str, caret: u32) -> (String, String) {
    let mut units = 0u32;
    for (byte, c) in text.char_indices() {
        let next = units + c.len_utf16() as u32;
        if next > caret {
            return (text[..byte].to_string(), text[byte..].to_string());
        }
        units = next;
    }
    (text.to_string(), String::new())
}

/// The caret position (UTF-16 units) at the end of `prefix`.
pub fn caret_after(prefix: &str) -> u32 {
    prefix.encode_utf16().count() as u32
}

/// HTML of an infill: the prefix and suffix as quiet context, the middle highlighted
/// as the continuation of the prefix and marked, so the insertion reads in place.
pub fn render(language: &str, prefix: &str, middle: &str, suffix: &str) -> String {
    format!(
        "<pre class=\"code\"><code><span class=\"fill-context\">{}</span><mark class=\"fill\" data-testid=\"fill\">{}</mark><span class=\"fill-context\">{}</span></code></pre>",
        highlight::escape(prefix),
        highlight::highlight_continuation(language, prefix, middle),
        highlight::escape(suffix)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caret_splits_by_utf16_units() {
        assert_eq!(split_at_caret("abc", 1), ("a".into(), "bc".into()));
        assert_eq!(split_at_caret("abc", 0), ("".into(), "abc".into()));
        assert_eq!(split_at_caret("abc", 9), ("abc".into(), "".into()));
        // "é" is one unit, "😀" two: after both the caret is at 3.
        assert_eq!(split_at_caret("é😀x", 3), ("é😀".into(), "x".into()));
        assert_eq!(split_at_caret("é😀x", 2), ("é".into(), "😀x".into()), "inside a pair: before it");
        assert_eq!(caret_after("é😀"), 3);
    }

    #[test]
    fn the_middle_is_marked_between_escaped_context() {
        let html = render("Plain Text", "a<b", "MID", "&c");
        assert!(
            html.contains("a&lt;b</span><mark class=\"fill\" data-testid=\"fill\">MID</mark><span class=\"fill-context\">&amp;c"),
            "{html}"
        );
    }
}
