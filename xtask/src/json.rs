//! A small, strict JSON reader for the lines cargo prints with `--message-format=json`.
//!
//! xtask uses only `std`, so instead of serde this parses one JSON text into a [`Value`]
//! tree and lets the caller pick fields with [`Value::get`]. It is a complete reader of
//! RFC 8259 JSON (all string escapes including surrogate pairs, numbers kept as their
//! text), so a path with quotes, backslashes or non-ASCII characters comes back exactly as
//! cargo wrote it; nesting deeper than [`MAX_DEPTH`] is refused rather than overflowing the
//! stack. It is not fast and does not need to be: cargo prints a few hundred lines.

use std::fmt;

/// The deepest nesting of arrays and objects accepted (cargo's messages nest about 4 deep).
pub const MAX_DEPTH: usize = 128;

/// A parsed JSON value. Objects keep their members in order, duplicates included.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number, as written (it is only ever compared or printed here).
    Number(String),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object's members in the order written.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The first member named `key` of an object; `None` for a missing key or a non-object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value),
            _ => None,
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    /// The value of a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(value) => Some(*value),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Why a text is not JSON: what was wrong and the byte offset where it was noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What was expected or found.
    pub message: String,
    /// Byte offset into the input.
    pub offset: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

/// Parses `text` as one JSON value, surrounded by optional whitespace.
pub fn parse(text: &str) -> Result<Value, ParseError> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        pos: 0,
    };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("unexpected text after the value"));
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            message: message.into(),
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `byte` or fails saying `what` was expected.
    fn expect(&mut self, byte: u8, what: &str) -> Result<(), ParseError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected {what}")))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth >= MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Value, ParseError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error(format!("expected `{word}`")))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.pos += 1; // `{`
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let name = self.string()?;
            self.skip_ws();
            self.expect(b':', "`:` after a member name")?;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            members.push((name, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.error("expected `,` or `}` in an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.pos += 1; // `[`
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]` in an array")),
            }
        }
    }

    /// A string starting at the opening quote; returns its unescaped text.
    fn string(&mut self) -> Result<String, ParseError> {
        self.expect(b'"', "`\"`")?;
        let mut out = String::new();
        loop {
            // Copy the run of plain characters in one go. The input is a `&str` and the run
            // ends at an ASCII byte, so the slice is valid UTF-8.
            let start = self.pos;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            let run = std::str::from_utf8(&self.bytes[start..self.pos])
                .map_err(|_| self.error("invalid UTF-8 in a string"))?;
            out.push_str(run);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    out.push(self.escape()?);
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    /// The character of an escape sequence, just after its backslash.
    fn escape(&mut self) -> Result<char, ParseError> {
        let Some(byte) = self.peek() else {
            return Err(self.error("unterminated escape"));
        };
        self.pos += 1;
        Ok(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => {
                self.pos -= 1;
                return Err(self.error("unknown escape"));
            }
        })
    }

    /// `\uXXXX` (just after the `u`), joining a UTF-16 surrogate pair into one character.
    fn unicode_escape(&mut self) -> Result<char, ParseError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(self.error("high surrogate without a low surrogate"));
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("high surrogate without a low surrogate"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("low surrogate without a high surrogate")),
            _ => first,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid \\u escape"))
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("expected 4 hex digits after \\u"))?;
        let value = u32::from_str_radix(digits, 16)
            .map_err(|_| self.error("expected 4 hex digits after \\u"))?;
        self.pos += 4;
        Ok(value)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, kept as text.
    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.pos])
            .map_err(|_| self.error("invalid number"))?;
        Ok(Value::Number(text.to_owned()))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), ParseError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.error("expected a digit"));
        }
        self.digits();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str) -> Value {
        Value::String(text.to_owned())
    }

    #[test]
    fn parses_a_cargo_artifact_line() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/gpu#0.1.0","manifest_path":"/w/crates/gpu/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"behaviour","src_path":"/w/crates/gpu/tests/behaviour/main.rs","edition":"2021","doctest":false,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":true},"features":[],"filenames":["/w/target/release/deps/behaviour-0f1e2d3c4b5a6978"],"executable":"/w/target/release/deps/behaviour-0f1e2d3c4b5a6978","fresh":true}"#;
        let value = parse(line).unwrap();
        assert_eq!(
            value.get("reason").and_then(Value::as_str),
            Some("compiler-artifact")
        );
        let target = value.get("target").unwrap();
        assert_eq!(
            target.get("name").and_then(Value::as_str),
            Some("behaviour")
        );
        assert_eq!(
            target.get("kind").and_then(Value::as_array),
            Some(&[string("test")][..])
        );
        let profile = value.get("profile").unwrap();
        assert_eq!(profile.get("test").and_then(Value::as_bool), Some(true));
        assert_eq!(
            profile.get("opt_level"),
            Some(&Value::String("3".to_owned()))
        );
        assert_eq!(
            profile.get("debuginfo"),
            Some(&Value::Number("0".to_owned()))
        );
        assert_eq!(
            value.get("executable").and_then(Value::as_str),
            Some("/w/target/release/deps/behaviour-0f1e2d3c4b5a6978")
        );
        assert_eq!(value.get("missing"), None);
        assert_eq!(string("x").get("reason"), None);
    }

    #[test]
    fn null_executable_is_not_a_string() {
        let value = parse(r#"{"executable":null,"fresh":false}"#).unwrap();
        assert_eq!(value.get("executable"), Some(&Value::Null));
        assert_eq!(value.get("executable").and_then(Value::as_str), None);
        assert_eq!(value.get("fresh").and_then(Value::as_bool), Some(false));
    }

    #[test]
    fn unescapes_quotes_backslashes_and_controls() {
        let value = parse(r#""C:\\dir \"quoted\"\/x\ty\n\b\f\r""#).unwrap();
        assert_eq!(value, string("C:\\dir \"quoted\"/x\ty\n\u{8}\u{c}\r"));
        // A backslash just before the closing quote must not swallow the quote.
        assert_eq!(
            parse(r#"["a\\", "b"]"#).unwrap(),
            Value::Array(vec![string("a\\"), string("b")])
        );
    }

    #[test]
    fn unescapes_unicode_and_keeps_raw_utf8() {
        assert_eq!(parse(r#""\u00e9\u0041""#).unwrap(), string("éA"));
        assert_eq!(parse(r#""\ud83d\ude00""#).unwrap(), string("😀"));
        assert_eq!(parse("\"/tmp/größe/😀\"").unwrap(), string("/tmp/größe/😀"));
    }

    #[test]
    fn parses_numbers_literals_and_whitespace() {
        let value = parse(" [ -0.5e+3 , 0 , 12 , true , false , null , { } , [ ] ] \n").unwrap();
        assert_eq!(
            value,
            Value::Array(vec![
                Value::Number("-0.5e+3".to_owned()),
                Value::Number("0".to_owned()),
                Value::Number("12".to_owned()),
                Value::Bool(true),
                Value::Bool(false),
                Value::Null,
                Value::Object(vec![]),
                Value::Array(vec![]),
            ])
        );
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "{",
            r#"{"a" 1}"#,
            r#"{"a":1,}"#,
            "[1,]",
            r#""unterminated"#,
            r#""bad \q escape""#,
            "\"raw\ttab\"",
            r#""\ud83d alone""#,
            r#""\ude00""#,
            r#""\u12""#,
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "{} {}",
            "nul",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn refuses_deep_nesting_without_overflowing() {
        let deep = "[".repeat(100_000);
        let err = parse(&deep).unwrap_err();
        assert!(err.message.contains("deeply"), "{err}");
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn error_reports_offset() {
        let err = parse(r#"{"a":x}"#).unwrap_err();
        assert_eq!(err.offset, 5);
        assert_eq!(err.to_string(), "expected a value at byte 5");
    }
}
