//! Example prompts: code completions in several languages and two chat questions.

use peregrine_api::playground::Mode;

/// One example, as offered in the examples menu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Example {
    pub label: &'static str,
    /// A syntax name the highlighter knows (see `highlight::LANGUAGES`).
    pub language: &'static str,
    pub mode: Mode,
    pub prompt: &'static str,
}

/// Every example; the first is the page's initial prompt.
pub const EXAMPLES: &[Example] = &[
    Example {
        label: "Python: Fibonacci",
        language: "Python",
        mode: Mode::Complete,
        prompt: "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    },
    Example {
        label: "Rust: greatest common divisor",
        language: "Rust",
        mode: Mode::Complete,
        prompt: "/// Returns the greatest common divisor of `a` and `b`.\nfn gcd(a: u64, b: u64) -> u64 {\n",
    },
    Example {
        label: "JavaScript: debounce",
        language: "JavaScript",
        mode: Mode::Complete,
        prompt: "// Calls `fn` at most once per `ms` milliseconds.\nfunction debounce(fn, ms) {\n",
    },
    Example {
        label: "Go: reverse a string",
        language: "Go",
        mode: Mode::Complete,
        prompt: "package main\n\n// reverse returns s with its runes in reverse order.\nfunc reverse(s string) string {\n",
    },
    Example {
        label: "C: string length",
        language: "C",
        mode: Mode::Complete,
        prompt: "#include <stddef.h>\n\n/* Returns the length of a NUL-terminated string. */\nsize_t my_strlen(const char *s) {\n",
    },
    Example {
        label: "SQL: top customers",
        language: "SQL",
        mode: Mode::Complete,
        prompt: "-- The five customers with the highest total order value\nSELECT",
    },
    Example {
        label: "Chat: palindrome in Python",
        language: "Markdown",
        mode: Mode::Chat,
        prompt: "Write a Python function that checks whether a string is a palindrome, then explain it in two sentences.",
    },
    Example {
        label: "Chat: processes and threads",
        language: "Markdown",
        mode: Mode::Chat,
        prompt: "What is the difference between a process and a thread? Answer briefly.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_language_is_highlightable() {
        for e in EXAMPLES {
            assert!(crate::highlight::syntax(e.language).is_some() || e.mode == Mode::Chat, "{}", e.label);
        }
    }
}
