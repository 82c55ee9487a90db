//! Syntax highlighting of code output with syntect's Sublime grammars (the
//! pure-Rust `fancy-regex` engine, so it runs in wasm32). We render syntect's
//! scope stacks ourselves to flat `<span class="hl-…">` runs, mapping scopes to a
//! few theme categories the way a TextMate theme's selectors do, because the
//! output is highlighted in the context of the prompt it continues while only
//! the continuation is shown.

use std::sync::OnceLock;

use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxReference, SyntaxSet};

/// Languages offered in the language menu: (label, syntect syntax name).
pub const LANGUAGES: &[(&str, &str)] = &[
    ("Python", "Python"),
    ("Rust", "Rust"),
    ("JavaScript", "JavaScript"),
    ("Go", "Go"),
    ("C", "C"),
    ("C++", "C++"),
    ("Java", "Java"),
    ("SQL", "SQL"),
    ("Shell", "Bourne Again Shell (bash)"),
    ("HTML", "HTML"),
    ("JSON", "JSON"),
    ("Markdown", "Markdown"),
    ("Plain text", "Plain Text"),
];

/// Above this many bytes, output is shown without highlighting (it is re-parsed on
/// every streamed chunk).
pub const MAX_HIGHLIGHT_BYTES: usize = 128 * 1024;

/// Scope prefixes to theme classes; the innermost scope with a match decides.
/// More specific prefixes come first.
const CATEGORIES: &[(&str, &str)] = &[
    ("comment", "hl-comment"),
    ("constant.character.escape", "hl-escape"),
    ("string", "hl-string"),
    ("constant.numeric", "hl-number"),
    ("constant", "hl-constant"),
    ("variable.language", "hl-constant"),
    ("keyword.operator", "hl-operator"),
    ("keyword", "hl-keyword"),
    ("storage.type", "hl-type"),
    ("storage", "hl-keyword"),
    ("entity.name.function", "hl-function"),
    ("support.function", "hl-function"),
    ("variable.function", "hl-function"),
    ("entity.name.tag", "hl-tag"),
    ("entity.other.attribute-name", "hl-attribute"),
    ("entity.name", "hl-type"),
    ("support.type", "hl-type"),
    ("support.class", "hl-type"),
    ("variable.parameter", "hl-parameter"),
    ("markup.heading", "hl-keyword"),
];

/// The bundled grammars, loaded once on first use.
pub fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

/// A grammar by syntax name, file extension or fence token ("rust", "py", "C++").
pub fn syntax(name: &str) -> Option<&'static SyntaxReference> {
    let ss = syntaxes();
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    ss.find_syntax_by_name(name).or_else(|| ss.find_syntax_by_token(name)).or_else(|| {
        let alias = match name.to_ascii_lowercase().as_str() {
            "js" | "jsx" | "ts" | "typescript" | "node" => "JavaScript",
            "sh" | "bash" | "shell" | "zsh" | "console" => "Bourne Again Shell (bash)",
            "c++" | "cpp" | "cxx" => "C++",
            "golang" => "Go",
            "text" | "plain" | "plaintext" | "txt" => "Plain Text",
            _ => return None,
        };
        ss.find_syntax_by_name(alias)
    })
}

/// A language for a completion prompt: a shebang or mode line, else telltale
/// tokens, else plain text.
pub fn guess_language(prompt: &str) -> &'static str {
    if let Some(s) = prompt.lines().next().and_then(|l| syntaxes().find_syntax_by_first_line(l)) {
        if let Some((_, name)) = LANGUAGES.iter().find(|(_, n)| *n == s.name) {
            return name;
        }
    }
    let has = |needles: &[&str]| needles.iter().any(|n| prompt.contains(n));
    let trimmed = prompt.trim_start();
    if has(&["fn ", "impl ", "let mut ", "pub struct", "use std::"]) {
        "Rust"
    } else if has(&["package main", "func "]) {
        "Go"
    } else if has(&["#include", "int main("]) {
        if has(&["std::", "template<", "template <", "class ", "namespace "]) {
            "C++"
        } else {
            "C"
        }
    } else if has(&["public class", "public static", "System.out"]) {
        "Java"
    } else if has(&["def ", "import ", "\"\"\"", "print(", "elif "]) {
        "Python"
    } else if has(&["function ", "const ", "=> ", "console.", "let "]) {
        "JavaScript"
    } else if ["SELECT", "WITH", "CREATE", "INSERT", "UPDATE", "--"].iter().any(|k| trimmed.starts_with(k)) {
        "SQL"
    } else if trimmed.starts_with('<') {
        "HTML"
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        "JSON"
    } else {
        "Plain Text"
    }
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn class_of(stack: &ScopeStack) -> Option<&'static str> {
    stack.as_slice().iter().rev().find_map(|scope: &Scope| {
        let name = scope.build_string();
        CATEGORIES
            .iter()
            .find(|(prefix, _)| name == *prefix || name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.')))
            .map(|(_, class)| *class)
    })
}

/// Flat spans, merging neighbours of the same class.
struct Spans {
    html: String,
    open: Option<Option<&'static str>>,
}

impl Spans {
    fn push(&mut self, class: Option<&'static str>, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.open != Some(class) {
            self.close();
            if let Some(c) = class {
                self.html.push_str(&format!("<span class=\"{c}\">"));
            }
            self.open = Some(class);
        }
        self.html.push_str(&escape(text));
    }

    fn close(&mut self) {
        if let Some(Some(_)) = self.open.take() {
            self.html.push_str("</span>");
        }
    }
}

/// HTML for `text`, highlighted as the continuation of `prefix` in `language`
/// (only `text` is rendered). Falls back to escaped plain text on unknown
/// languages, grammar errors and very long inputs.
pub fn highlight_continuation(language: &str, prefix: &str, text: &str) -> String {
    let Some(syntax) = syntax(language) else { return escape(text) };
    if prefix.len() + text.len() > MAX_HIGHLIGHT_BYTES || syntax.name == "Plain Text" {
        return escape(text);
    }
    render(syntax, prefix, text).unwrap_or_else(|| escape(text))
}

/// HTML for a whole code block in `language` (a fence token or syntax name).
pub fn highlight_code(language: &str, code: &str) -> String {
    highlight_continuation(language, "", code)
}

fn render(syntax: &SyntaxReference, prefix: &str, text: &str) -> Option<String> {
    let full = format!("{prefix}{text}");
    let boundary = prefix.len();
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let mut class = None;
    let mut spans = Spans { html: String::with_capacity(text.len() * 3), open: None };
    let mut line_start = 0;
    for line in full.split_inclusive('\n') {
        let ops = state.parse_line(line, syntaxes()).ok()?;
        let mut emit = |from: usize, to: usize, class: Option<&'static str>| {
            let (a, b) = ((line_start + from).max(boundary), line_start + to);
            if a < b {
                spans.push(class, &full[a..b]);
            }
        };
        let mut pos = 0;
        for (at, op) in ops {
            emit(pos, at, class);
            pos = at;
            stack.apply(&op).ok()?;
            class = class_of(&stack);
        }
        emit(pos, line.len(), class);
        line_start += line.len();
    }
    spans.close();
    Some(spans.html)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip_tags(html: &str) -> String {
        let mut out = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
    }

    #[test]
    fn highlights_only_the_continuation_in_context() {
        // The continuation starts inside a string opened by the prompt.
        let html = highlight_continuation("Python", "x = \"abc", "def\"\n# note <b>\n");
        assert_eq!(strip_tags(&html), "def\"\n# note <b>\n");
        assert!(html.starts_with("<span class=\"hl-string\">def&quot;"), "{html}");
        assert!(html.contains("<span class=\"hl-comment\"># note &lt;b&gt;"), "{html}");
    }

    #[test]
    fn rust_keywords_and_functions() {
        let html = highlight_code("rust", "fn main() { let x = 1; }\n");
        assert!(html.contains("<span class=\"hl-keyword\">fn</span>") || html.contains("hl-type\">fn"), "{html}");
        assert!(html.contains("hl-function\">main"), "{html}");
        assert!(html.contains("hl-number\">1"), "{html}");
        assert_eq!(strip_tags(&html), "fn main() { let x = 1; }\n");
    }

    #[test]
    fn unknown_or_plain_is_escaped_text() {
        assert_eq!(highlight_code("klingon", "<a>"), "&lt;a&gt;");
        assert_eq!(highlight_code("Plain Text", "a & b"), "a &amp; b");
        assert!(syntax("py").is_some() && syntax("js").is_some() && syntax("cpp").is_some() && syntax("sh").is_some());
    }

    #[test]
    fn guesses() {
        assert_eq!(guess_language("def f(x):\n"), "Python");
        assert_eq!(guess_language("#!/usr/bin/env python3\nx"), "Python");
        assert_eq!(guess_language("fn gcd(a: u64) -> u64 {"), "Rust");
        assert_eq!(guess_language("#include <stdio.h>\nint main() {"), "C");
        assert_eq!(guess_language("SELECT"), "SQL");
        assert_eq!(guess_language("function debounce(fn, ms) {"), "JavaScript");
        assert_eq!(guess_language("hello there"), "Plain Text");
        for e in crate::examples::EXAMPLES.iter().filter(|e| e.mode == peregrine_api::playground::Mode::Complete) {
            assert_eq!(guess_language(e.prompt), e.language, "{}", e.label);
        }
    }
}
