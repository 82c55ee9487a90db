//! llama.cpp's GBNF grammars (`grammars/README.md` there: `name ::= …` rules, `"…"`
//! literals, `[…]` / `[^…]` character classes, `.`, `( )`, `|`, `* + ?`, `{m}`,
//! `{m,}`, `{m,n}`, `#` comments, a `root` rule) translated into llguidance's Lark
//! dialect, which the constraint compiler takes. A rule starts wherever a name is
//! followed by `::=`, so a rule may continue over several lines.

use std::collections::HashMap;
use std::fmt::Write;

/// The Lark grammar equivalent to `gbnf`, or what is wrong with it (with the line).
pub(super) fn to_lark(gbnf: &str) -> Result<String, String> {
    let mut p = Parser { src: gbnf.as_bytes(), pos: 0, names: HashMap::new(), used: Vec::new() };
    let mut rules = Vec::new();
    p.skip_space();
    while p.pos < p.src.len() {
        let name = p.name().ok_or_else(|| p.error("expected a rule name"))?;
        p.skip_space();
        if !p.eat("::=") {
            return Err(p.error(&format!("expected `::=` after `{name}`")));
        }
        let lark_name = p.lark_name(&name);
        let body = p.alternatives()?;
        rules.push((name, lark_name, body));
        p.skip_space();
    }
    let defined: Vec<&str> = rules.iter().map(|r| r.0.as_str()).collect();
    if let Some((missing, line)) = p.used.iter().find(|(u, _)| !defined.contains(&u.as_str())) {
        return Err(format!("line {line}: rule `{missing}` is used but never defined"));
    }
    let Some(root) = rules.iter().find(|r| r.0 == "root") else {
        return Err("the grammar has no `root` rule".into());
    };
    let mut out = format!("start: {}\n", root.1);
    let mut seen = Vec::new();
    for (name, lark, body) in &rules {
        if seen.contains(name) {
            return Err(format!("rule `{name}` is defined twice"));
        }
        seen.push(name.clone());
        let _ = writeln!(out, "{lark}: {body}");
    }
    Ok(out)
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    /// GBNF name → Lark name (Lark rule names are lowercase, without dashes).
    names: HashMap<String, String>,
    /// Every rule reference, with its line.
    used: Vec<(String, usize)>,
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

impl Parser<'_> {
    fn line(&self) -> usize {
        1 + self.src[..self.pos.min(self.src.len())].iter().filter(|&&b| b == b'\n').count()
    }

    fn error(&self, what: &str) -> String {
        format!("line {}: {what}", self.line())
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.src[self.pos..].starts_with(s.as_bytes()) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Spaces, newlines and comments.
    fn skip_space(&mut self) {
        while let Some(b) = self.peek() {
            if b == b'#' {
                while self.peek().is_some_and(|b| b != b'\n') {
                    self.pos += 1;
                }
            } else if b.is_ascii_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(is_name_byte) {
            self.pos += 1;
        }
        (self.pos > start).then(|| String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
    }

    /// Whether a rule definition (`name ::=`) starts here.
    fn at_definition(&self) -> bool {
        let mut i = self.pos;
        while self.src.get(i).copied().is_some_and(is_name_byte) {
            i += 1;
        }
        if i == self.pos {
            return false;
        }
        while self.src.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        self.src[i..].starts_with(b"::=")
    }

    fn lark_name(&mut self, name: &str) -> String {
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        let mut base: String = name.chars().map(|c| if c == '-' { '_' } else { c.to_ascii_lowercase() }).collect();
        base.insert_str(0, "g_");
        let mut candidate = base.clone();
        let mut k = 1;
        while self.names.values().any(|v| *v == candidate) {
            candidate = format!("{base}_{k}");
            k += 1;
        }
        self.names.insert(name.to_string(), candidate.clone());
        candidate
    }

    /// `seq ( "|" seq )*`, up to the next definition, a `)` or the end.
    fn alternatives(&mut self) -> Result<String, String> {
        let mut alts = vec![self.sequence()?];
        while self.peek() == Some(b'|') {
            self.pos += 1;
            alts.push(self.sequence()?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self) -> Result<String, String> {
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None | Some(b'|') | Some(b')') => break,
                _ if self.at_definition() => break,
                _ => {}
            }
            let atom = self.atom()?;
            let repeated = self.repetition(atom)?;
            items.push(repeated);
        }
        if items.is_empty() {
            // An empty alternative matches nothing: Lark spells it as an empty string.
            return Ok("\"\"".into());
        }
        Ok(items.join(" "))
    }

    fn atom(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let text = self.literal()?;
                serde_json::to_string(&text).map_err(|e| self.error(&e.to_string()))
            }
            Some(b'[') => {
                self.pos += 1;
                self.class()
            }
            Some(b'.') => {
                self.pos += 1;
                Ok("/(?s:.)/".into())
            }
            Some(b'(') => {
                self.pos += 1;
                let inner = self.alternatives()?;
                self.skip_space();
                if self.peek() != Some(b')') {
                    return Err(self.error("expected `)`"));
                }
                self.pos += 1;
                Ok(format!("({inner})"))
            }
            Some(b) if is_name_byte(b) => {
                let line = self.line();
                let name = self.name().expect("a name byte starts a name");
                self.used.push((name.clone(), line));
                Ok(self.lark_name(&name))
            }
            Some(b) => Err(self.error(&format!("unexpected `{}`", b as char))),
            None => Err(self.error("unexpected end of grammar")),
        }
    }

    /// A postfix `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`, `{,n}` on `atom`.
    fn repetition(&mut self, atom: String) -> Result<String, String> {
        match self.peek() {
            Some(op @ (b'*' | b'+' | b'?')) => {
                self.pos += 1;
                Ok(format!("{atom}{}", op as char))
            }
            Some(b'{') => {
                self.pos += 1;
                let close = self.src[self.pos..].iter().position(|&b| b == b'}').ok_or_else(|| self.error("expected `}`"))?;
                let spec = String::from_utf8_lossy(&self.src[self.pos..self.pos + close]).replace(char::is_whitespace, "");
                self.pos += close + 1;
                let num = |s: &str| s.parse::<u32>().map_err(|_| self.error(&format!("bad repetition `{{{spec}}}`")));
                let (min, max) = match spec.split_once(',') {
                    None => (num(&spec)?, Some(num(&spec)?)),
                    Some((a, "")) => (num(a)?, None),
                    Some(("", b)) => (0, Some(num(b)?)),
                    Some((a, b)) => (num(a)?, Some(num(b)?)),
                };
                // A group is already parenthesised; anything else is one item.
                let atom = if atom.starts_with('(') { atom } else { format!("({atom})") };
                match max {
                    Some(0) => Ok("\"\"".into()),
                    Some(m) if m < min => Err(self.error(&format!("bad repetition `{{{spec}}}`: the maximum is below the minimum"))),
                    Some(m) => Ok(format!("{atom}{{{min},{m}}}")),
                    None => Ok(format!("{atom}{{{min},}}")),
                }
            }
            _ => Ok(atom),
        }
    }

    /// One escaped or plain character of a literal or class.
    fn char(&mut self) -> Result<char, String> {
        let rest = std::str::from_utf8(&self.src[self.pos..]).map_err(|_| self.error("the grammar is not UTF-8"))?;
        let mut chars = rest.chars();
        let c = chars.next().ok_or_else(|| self.error("unterminated literal"))?;
        self.pos += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let e = chars.next().ok_or_else(|| self.error("unterminated escape"))?;
        self.pos += e.len_utf8();
        let hex = |p: &mut Self, n: usize| -> Result<char, String> {
            let digits = p.src.get(p.pos..p.pos + n).and_then(|d| std::str::from_utf8(d).ok()).unwrap_or("");
            let v = u32::from_str_radix(digits, 16).map_err(|_| p.error(&format!("bad \\{e} escape")))?;
            p.pos += n;
            char::from_u32(v).ok_or_else(|| p.error(&format!("\\{e}{digits} is not a character")))
        };
        match e {
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            't' => Ok('\t'),
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            '\\' | '"' | '[' | ']' | '-' | '^' => Ok(e),
            other => Err(self.error(&format!("unknown escape `\\{other}`"))),
        }
    }

    /// The text of a `"…"` literal (its opening quote already read).
    fn literal(&mut self) -> Result<String, String> {
        let mut text = String::new();
        loop {
            if self.peek() == Some(b'"') {
                self.pos += 1;
                return Ok(text);
            }
            if matches!(self.peek(), None | Some(b'\n')) {
                return Err(self.error("unterminated string literal"));
            }
            text.push(self.char()?);
        }
    }

    /// A `[…]` class (its `[` already read) as a Lark regex.
    fn class(&mut self) -> Result<String, String> {
        let negated = self.peek() == Some(b'^');
        if negated {
            self.pos += 1;
        }
        let mut out = String::from(if negated { "/[^" } else { "/[" });
        loop {
            match self.peek() {
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                None | Some(b'\n') => return Err(self.error("unterminated character class")),
                _ => {}
            }
            let lo = self.char()?;
            push_class_char(&mut out, lo);
            if self.peek() == Some(b'-') && self.src.get(self.pos + 1) != Some(&b']') {
                self.pos += 1;
                let hi = self.char()?;
                if hi < lo {
                    return Err(self.error(&format!("bad range `{lo}-{hi}` in a character class")));
                }
                out.push('-');
                push_class_char(&mut out, hi);
            }
        }
        out.push_str("]/");
        Ok(out)
    }
}

/// A character inside a regex class: letters and digits as they are, anything else by
/// its code point, so no character is special to the regex or to Lark's `/…/`.
fn push_class_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:X}}}", c as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions_translate() {
        let lark = to_lark(
            "# a comment\nroot ::= greeting (\" \" name-part){1,3} [.!]?\ngreeting ::= \"hi\" | \"h\\x65llo\"\nname-part ::= [A-Z] [a-z]* .\n",
        )
        .unwrap();
        assert_eq!(
            lark,
            "start: g_root\ng_root: g_greeting (\" \" g_name_part){1,3} /[\\x{2E}\\x{21}]/?\ng_greeting: \"hi\" | \"hello\"\ng_name_part: /[A-Z]/ /[a-z]/* /(?s:.)/\n"
        );
    }

    #[test]
    fn a_rule_may_span_lines_until_the_next_definition() {
        let lark = to_lark("root ::=\n  \"{\"\n  ( x\n  | \"y\" )\n  \"}\"\nx ::= [^\"\\n]+").unwrap();
        assert_eq!(lark, "start: g_root\ng_root: \"{\" (g_x | \"y\") \"}\"\ng_x: /[^\\x{22}\\x{A}]/+\n");
    }

    #[test]
    fn mistakes_are_named_with_their_line() {
        assert_eq!(to_lark("root ::= \"a\" b").unwrap_err(), "line 1: rule `b` is used but never defined");
        assert_eq!(to_lark("start ::= \"a\"").unwrap_err(), "the grammar has no `root` rule");
        assert!(to_lark("root ::= \"a").unwrap_err().contains("unterminated string literal"));
        assert!(to_lark("root ::= [a-").unwrap_err().contains("line 1"));
        assert!(to_lark("root \"a\"").unwrap_err().contains("expected `::=`"));
        assert!(to_lark("root ::= (\"a\"\n").unwrap_err().contains("expected `)`"));
        assert!(to_lark("root ::= \"a\"{3,1}").unwrap_err().contains("maximum is below the minimum"));
    }
}
