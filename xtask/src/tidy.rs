//! `cargo xtask tidy`: mechanical checks of the house rules in STYLE.md.
//!
//! Like rust-analyzer's `tidy.rs`, these are line-level heuristics, not a parser: cheap,
//! dependency-free and good enough to catch a forgotten comment. Every `.rs` file under
//! `crates/`, `examples/` and `xtask/` (not `target/`) is checked for:
//!
//! 1. module docs: the first non-empty line starts with `//!`;
//! 2. unsafe: every `unsafe` block and `unsafe impl` has a `// SAFETY:` comment on its line,
//!    the three lines above or the comment block directly above; every `unsafe fn` and
//!    `unsafe trait` has a `# Safety` section in its `///` docs, except an `unsafe fn` that
//!    implements a trait method (the trait documents the contract);
//! 3. no `.unwrap()` or `.expect(` in library code (`crates/*/src/`, before the first
//!    top-level `#[cfg(test)]`, not in `tests.rs` or `tests/` modules); a line marked
//!    `// tidy: allow(unwrap)` is exempt.
//!
//! Comments and string contents are blanked first (see `lex`), so the checks never fire on
//! code quoted in docs or on test fixtures.

mod lex;
#[cfg(test)]
mod tests;

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{Failure, Result};
use lex::{code_only, is_ident_start, next_word, skip_ws, word_end};

/// Folders under the workspace root whose `.rs` files are checked.
const CHECKED_DIRS: [&str; 3] = ["crates", "examples", "xtask"];

/// The marker that exempts one line from the unwrap check.
const ALLOW_UNWRAP: &str = "// tidy: allow(unwrap)";

/// One broken rule: a 1-based line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Violation {
    fn new(line_index: usize, message: impl Into<String>) -> Self {
        Violation {
            line: line_index + 1,
            message: message.into(),
        }
    }
}

/// Runs `cargo xtask tidy`.
pub fn run_cli(root: &Path, args: &[String]) -> Result {
    if crate::wants_help(args) {
        print!("{}", crate::USAGE);
        return Ok(());
    }
    if let Some(arg) = args.first() {
        return Err(Failure::usage(format!(
            "`cargo xtask tidy` takes no arguments (got `{arg}`)"
        )));
    }
    run(root)
}

/// Checks every `.rs` file in the workspace, printing `path:line: message` per violation.
pub fn run(root: &Path) -> Result {
    let mut files = Vec::new();
    for dir in CHECKED_DIRS {
        collect_rs_files(&root.join(dir), &mut files)?;
    }
    files.sort();
    let mut count = 0;
    for file in &files {
        let relative = file.strip_prefix(root).unwrap_or(file);
        let shown = relative
            .components()
            .map(|part| part.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let text = match fs::read_to_string(file) {
            Ok(text) => text,
            Err(err) => {
                println!("{shown}:1: could not read the file: {err}");
                count += 1;
                continue;
            }
        };
        for violation in check_file(&shown, &text) {
            println!("{shown}:{}: {}", violation.line, violation.message);
            count += 1;
        }
    }
    if count == 0 {
        println!("tidy: {} files checked, all clean", files.len());
        Ok(())
    } else {
        Err(Failure::new(format!(
            "tidy: {count} violation(s) in {} files checked",
            files.len()
        )))
    }
}

fn collect_rs_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        // A folder that does not exist (yet) has nothing to check.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => {
            return Err(Failure::new(format!(
                "could not list `{}`: {err}",
                dir.display()
            )))
        }
    };
    for entry in entries {
        let entry = entry
            .map_err(|err| Failure::new(format!("could not list `{}`: {err}", dir.display())))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if is_dir {
            if name != "target" && !name.starts_with('.') {
                collect_rs_files(&path, files)?;
            }
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// All checks for one file; `path` is relative to the root with `/` separators.
pub fn check_file(path: &str, text: &str) -> Vec<Violation> {
    let mut violations = check_module_docs(text);
    violations.extend(check_unsafe(text));
    if is_library_source(path) {
        violations.extend(check_unwrap(text));
    }
    violations.sort_by_key(|violation| violation.line);
    // Two unsafe blocks on one line are one thing to fix.
    violations.dedup();
    violations
}

/// Library code: `crates/<name>/src/...`, except `tests.rs` files and `tests/` folders.
pub fn is_library_source(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["crates", _, "src", inner @ .., file] => *file != "tests.rs" && !inner.contains(&"tests"),
        _ => false,
    }
}

/// Rule 1: the first non-empty line is a `//!` module doc comment.
pub fn check_module_docs(text: &str) -> Vec<Violation> {
    match text
        .lines()
        .enumerate()
        .find(|(_, line)| !line.trim().is_empty())
    {
        Some((_, line)) if line.trim_start().starts_with("//!") => Vec::new(),
        Some((index, _)) => vec![Violation::new(
            index,
            "missing module docs: the file must start with a `//!` comment saying what it is for",
        )],
        None => vec![Violation::new(
            0,
            "empty file: add `//!` module docs or delete it",
        )],
    }
}

/// Rule 3: no `.unwrap()` / `.expect(` outside tests (call only for library files).
pub fn check_unwrap(text: &str) -> Vec<Violation> {
    let code = code_only(text);
    let mut violations = Vec::new();
    for (index, (line, code_line)) in text.lines().zip(code.lines()).enumerate() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        if line.trim_start().starts_with("//") || line.contains(ALLOW_UNWRAP) {
            continue;
        }
        for call in [".unwrap()", ".expect("] {
            if code_line.contains(call) {
                violations.push(Violation::new(
                    index,
                    format!(
                        "`{call}` in library code: return an error instead \
                         (or mark a provably infallible line `{ALLOW_UNWRAP}`)"
                    ),
                ));
            }
        }
    }
    violations
}

/// What an `unsafe` keyword introduces.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Unsafe {
    Block,
    Impl,
    Fn,
    Trait,
}

/// The kind of a `{ ... }` block, as far as rule 2 needs to know.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Block {
    /// `impl Trait for Type { ... }`: its `unsafe fn`s follow the trait's contract.
    TraitImpl,
    Other,
}

/// Rule 2: SAFETY comments on unsafe blocks and impls, `# Safety` docs on unsafe fns/traits.
pub fn check_unsafe(text: &str) -> Vec<Violation> {
    let lines: Vec<&str> = text.lines().collect();
    let code: Vec<char> = code_only(text).chars().collect();
    let mut violations = Vec::new();
    // Enclosing blocks, and the code since the last `;`, `{` or `}` (the next block's header).
    let mut blocks: Vec<Block> = Vec::new();
    let mut header = String::new();
    let mut line = 0;
    let mut i = 0;
    while i < code.len() {
        let c = code[i];
        if is_ident_start(c) {
            let end = word_end(&code, i);
            let word: String = code[i..end].iter().collect();
            if word == "unsafe" {
                let in_trait_impl = blocks.last() == Some(&Block::TraitImpl);
                if let Some(message) = unsafe_violation(&code, end, &lines, line, in_trait_impl) {
                    violations.push(Violation::new(line, message));
                }
            }
            header.push_str(&word);
            i = end;
            continue;
        }
        match c {
            '\n' => {
                line += 1;
                header.push(' ');
            }
            '{' => {
                blocks.push(classify_block(&header));
                header.clear();
            }
            '}' => {
                blocks.pop();
                header.clear();
            }
            ';' => header.clear(),
            _ => header.push(c),
        }
        i += 1;
    }
    violations
}

/// The complaint, if any, about the `unsafe` keyword that ends at `after` on `line`.
fn unsafe_violation(
    code: &[char],
    after: usize,
    lines: &[&str],
    line: usize,
    in_trait_impl: bool,
) -> Option<&'static str> {
    match unsafe_kind(code, after)? {
        Unsafe::Block if !has_safety_comment(lines, line) => {
            Some("`unsafe` block without a `// SAFETY:` comment saying why it is sound")
        }
        Unsafe::Impl if !has_safety_comment(lines, line) => {
            Some("`unsafe impl` without a `// SAFETY:` comment saying why it is sound")
        }
        Unsafe::Fn if !in_trait_impl && !has_safety_section(lines, line) => Some(
            "`unsafe fn` without a `# Safety` section in its `///` docs listing the caller's duties",
        ),
        Unsafe::Trait if !has_safety_section(lines, line) => Some(
            "`unsafe trait` without a `# Safety` section in its `///` docs listing the implementor's duties",
        ),
        _ => None,
    }
}

/// What follows `unsafe` at `i`: a block, an impl, a fn or trait declaration, or something
/// that needs no comment (a fn pointer type such as `unsafe fn(u8)`, `$(unsafe)?`, ...).
fn unsafe_kind(code: &[char], i: usize) -> Option<Unsafe> {
    if code.get(skip_ws(code, i)) == Some(&'{') {
        return Some(Unsafe::Block);
    }
    let (word, mut end) = next_word(code, i)?;
    match word.as_str() {
        "impl" => Some(Unsafe::Impl),
        "trait" | "auto" => Some(Unsafe::Trait),
        "fn" => fn_declaration(code, end),
        "extern" => {
            // `unsafe extern "C" fn name`: skip the (blanked) ABI string.
            end = skip_ws(code, end);
            if code.get(end) == Some(&'"') {
                end = (end + 1..code.len())
                    .find(|&j| code[j] == '"')
                    .map_or(code.len(), |j| j + 1);
            }
            let (word, end) = next_word(code, end)?;
            if word == "fn" {
                fn_declaration(code, end)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `fn name` declares a function; `fn(` is a function pointer type.
fn fn_declaration(code: &[char], after_fn: usize) -> Option<Unsafe> {
    next_word(code, after_fn).map(|_| Unsafe::Fn)
}

/// A `SAFETY:` on the line itself, on one of the three lines above, or anywhere in a
/// comment block that runs unbroken up from the line above.
fn has_safety_comment(lines: &[&str], line: usize) -> bool {
    const MARKER: &str = "SAFETY:";
    if lines.get(line).is_some_and(|text| text.contains(MARKER)) {
        return true;
    }
    let mut only_comments = true;
    for above in (0..line.min(lines.len())).rev() {
        let text = lines[above];
        if text.contains(MARKER) {
            return true;
        }
        only_comments &= text.trim_start().starts_with("//");
        if line - above >= 3 && !only_comments {
            return false;
        }
    }
    false
}

/// A `# Safety` heading in the `///` lines above `line` (attributes and plain comments
/// between the docs and the item are allowed).
fn has_safety_section(lines: &[&str], line: usize) -> bool {
    for above in (0..line.min(lines.len())).rev() {
        let text = lines[above].trim_start();
        if text.starts_with("///") {
            if text.contains("# Safety") {
                return true;
            }
        } else if !(text.starts_with("#[") || text.starts_with("//")) {
            return false;
        }
    }
    false
}

/// Whether the code before a `{` opens an `impl Trait for Type` block.
///
/// Attributes and visibility are skipped; the `impl` must come first; a `for` counts only
/// outside `<...>` and not as `for<'a>` (higher-ranked bounds in generics or where-clauses).
fn classify_block(header: &str) -> Block {
    let chars: Vec<char> = strip_attributes(header).chars().collect();
    let mut seen_impl = false;
    let mut depth = 0i32;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident_start(c) {
            let end = word_end(&chars, i);
            let word: String = chars[i..end].iter().collect();
            if !seen_impl {
                match word.as_str() {
                    "impl" => seen_impl = true,
                    "pub" | "crate" | "super" | "self" | "in" | "unsafe" | "default" => {}
                    _ => return Block::Other,
                }
            } else if depth == 0 && word == "for" && chars.get(skip_ws(&chars, end)) != Some(&'<') {
                return Block::TraitImpl;
            }
            i = end;
            continue;
        }
        match c {
            '<' => depth += 1,
            '>' if i == 0 || chars[i - 1] != '-' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    Block::Other
}

/// `header` without `#[...]` and `#![...]` attributes.
fn strip_attributes(header: &str) -> String {
    let chars: Vec<char> = header.chars().collect();
    let mut out = String::with_capacity(header.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '#' {
            let mut open = skip_ws(&chars, i + 1);
            if chars.get(open) == Some(&'!') {
                open = skip_ws(&chars, open + 1);
            }
            if chars.get(open) == Some(&'[') {
                let mut depth = 0usize;
                let mut j = open;
                while j < chars.len() {
                    match chars[j] {
                        '[' => depth += 1,
                        ']' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                    if depth == 0 {
                        break;
                    }
                }
                out.push(' ');
                i = j;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}
