//! Just enough Rust lexing for tidy: blank out comments and literal contents.
//!
//! [`code_only`] returns the source with every comment and the inside of every string and
//! char literal replaced by spaces, newlines kept, so line `n` of the result is line `n` of
//! the input. Checks then match keywords and braces on code alone: `unsafe` in a doc
//! example, a comment or a test fixture string never counts, and `'{'` opens no block.

/// The source with comments and literal contents blanked (see the module docs).
pub fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        i = if c == '/' && next == Some('/') {
            line_comment(&chars, i, &mut out)
        } else if c == '/' && next == Some('*') {
            block_comment(&chars, i, &mut out)
        } else if c == '"' {
            string(&chars, i, &mut out)
        } else if c == '\'' {
            char_or_lifetime(&chars, i, &mut out)
        } else if is_ident_start(c) {
            let end = word_end(&chars, i);
            out.extend(&chars[i..end]);
            let word: String = chars[i..end].iter().collect();
            if matches!(word.as_str(), "r" | "br" | "cr") {
                raw_string(&chars, end, &mut out).unwrap_or(end)
            } else {
                end
            }
        } else {
            out.push(c);
            i + 1
        };
    }
    out
}

/// Whether `c` can start an identifier.
pub fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

/// Whether `c` can continue an identifier.
pub fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// The index just past the identifier starting at `start`.
pub fn word_end(chars: &[char], start: usize) -> usize {
    let mut end = start;
    while end < chars.len() && is_ident_char(chars[end]) {
        end += 1;
    }
    end
}

/// The index of the first non-whitespace char at or after `i`.
pub fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The identifier at `i` (after whitespace) and the index just past it.
pub fn next_word(chars: &[char], i: usize) -> Option<(String, usize)> {
    let start = skip_ws(chars, i);
    let end = word_end(chars, start);
    (end > start && is_ident_start(chars[start])).then(|| (chars[start..end].iter().collect(), end))
}

fn blank(c: char) -> char {
    if c == '\n' {
        '\n'
    } else {
        ' '
    }
}

fn line_comment(chars: &[char], mut i: usize, out: &mut String) -> usize {
    while i < chars.len() && chars[i] != '\n' {
        out.push(' ');
        i += 1;
    }
    i
}

/// Block comments nest in Rust.
fn block_comment(chars: &[char], mut i: usize, out: &mut String) -> usize {
    let mut depth = 0usize;
    while i < chars.len() {
        let pair = (chars[i], chars.get(i + 1).copied());
        if pair == ('/', Some('*')) {
            depth += 1;
        } else if pair == ('*', Some('/')) {
            depth -= 1;
        } else {
            out.push(blank(chars[i]));
            i += 1;
            continue;
        }
        out.push_str("  ");
        i += 2;
        if depth == 0 {
            break;
        }
    }
    i
}

/// A `"..."` literal starting at `i` (also the tail of `b"..."` and `c"..."`).
fn string(chars: &[char], mut i: usize, out: &mut String) -> usize {
    out.push('"');
    i += 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' && i + 1 < chars.len() {
            out.push(' ');
            i += 1;
        }
        out.push(blank(chars[i]));
        i += 1;
    }
    if i < chars.len() {
        out.push('"');
        i += 1;
    }
    i
}

/// A raw string whose `#`s or opening quote start at `i` (just after `r`, `br` or `cr`);
/// `None` when this is not one (e.g. the raw identifier `r#type`).
fn raw_string(chars: &[char], i: usize, out: &mut String) -> Option<usize> {
    let mut quote = i;
    while chars.get(quote) == Some(&'#') {
        quote += 1;
    }
    if chars.get(quote) != Some(&'"') {
        return None;
    }
    let hashes = quote - i;
    out.extend(&chars[i..=quote]);
    let mut j = quote + 1;
    while j < chars.len() {
        let closes = chars[j] == '"'
            && chars.len() - (j + 1) >= hashes
            && chars[j + 1..j + 1 + hashes].iter().all(|&c| c == '#');
        if closes {
            out.extend(&chars[j..j + 1 + hashes]);
            return Some(j + 1 + hashes);
        }
        out.push(blank(chars[j]));
        j += 1;
    }
    Some(j)
}

/// `'x'`, `'\n'`, `'\u{1F600}'` are char literals; `'a` in `&'a T` is a lifetime.
fn char_or_lifetime(chars: &[char], i: usize, out: &mut String) -> usize {
    let close = if chars.get(i + 1) == Some(&'\\') {
        // Escaped: the closing quote comes after the escaped char, on the same line.
        (i + 3..chars.len())
            .take_while(|&j| chars[j] != '\n')
            .find(|&j| chars[j] == '\'')
    } else if chars.get(i + 2) == Some(&'\'') && chars.get(i + 1) != Some(&'\n') {
        Some(i + 2)
    } else {
        None
    };
    match close {
        Some(close) => {
            out.push('\'');
            out.extend((i + 1..close).map(|_| ' '));
            out.push('\'');
            close + 1
        }
        None => {
            out.push('\'');
            i + 1
        }
    }
}
