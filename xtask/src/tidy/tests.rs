//! Unit tests for the tidy checks: small sources in, violations out.

use super::lex::code_only;
use super::*;

/// The 1-based lines a check complains about.
fn lines_of(violations: &[Violation]) -> Vec<usize> {
    violations.iter().map(|violation| violation.line).collect()
}

fn unsafe_lines(src: &str) -> Vec<usize> {
    lines_of(&check_unsafe(src))
}

fn unwrap_lines(src: &str) -> Vec<usize> {
    lines_of(&check_unwrap(src))
}

#[test]
fn module_docs_required_on_first_non_empty_line() {
    assert!(check_module_docs("//! Docs.\nfn f() {}\n").is_empty());
    assert!(check_module_docs("\n\n  //! Docs after blank lines.\n").is_empty());
    assert_eq!(
        lines_of(&check_module_docs("\nuse std::fs;\n//! Too late.\n")),
        [2]
    );
    assert_eq!(
        lines_of(&check_module_docs("/// Item docs.\nfn f() {}\n")),
        [1]
    );
    assert_eq!(lines_of(&check_module_docs("")), [1]);
}

#[test]
fn unsafe_block_needs_safety_comment_nearby() {
    assert_eq!(unsafe_lines("fn f() {\n    unsafe { g() }\n}\n"), [2]);
    assert!(unsafe_lines("// SAFETY: g has no preconditions.\nunsafe { g() };\n").is_empty());
    assert!(unsafe_lines("let x = unsafe { g() }; // SAFETY: no preconditions.\n").is_empty());
    // Three lines above is close enough ...
    assert!(unsafe_lines("// SAFETY: ok.\nlet a = 1;\nlet b = 2;\nunsafe { g() };\n").is_empty());
    // ... four lines above with code between is not.
    assert_eq!(
        unsafe_lines("// SAFETY: ok.\nlet a = 1;\nlet b = 2;\nlet c = 3;\nunsafe { g() };\n"),
        [5]
    );
    // A long comment block directly above counts however long it is.
    let long = "// SAFETY: the pointer\n// is valid\n// because\n// of reasons\n// stated here.\n";
    assert!(unsafe_lines(&format!("{long}unsafe {{ g() }};\n")).is_empty());
    // The brace may be on the next line.
    assert_eq!(unsafe_lines("let x = unsafe\n{ g() };\n"), [1]);
}

#[test]
fn unsafe_in_comments_strings_and_names_is_ignored() {
    let src = concat!(
        "//! Mentions unsafe { in docs.\n",
        "/// ```\n/// unsafe { g() }\n/// ```\n",
        "fn f() {\n",
        "    let s = \"unsafe { not code }\";\n",
        "    let r = r#\"\n        unsafe impl Send for X {}\n    \"#;\n",
        "    /* unsafe { block comment } */\n",
        "    // unsafe { line comment }\n",
        "}\n",
        "#![warn(unsafe_op_in_unsafe_fn)]\n",
        "type Callback = unsafe extern \"C\" fn(u8);\n",
        "type Plain = unsafe fn(*mut u8);\n",
    );
    assert!(unsafe_lines(src).is_empty(), "{:?}", check_unsafe(src));
}

#[test]
fn unsafe_impl_needs_safety_comment() {
    assert_eq!(
        unsafe_lines("struct P(*mut u8);\nunsafe impl Send for P {}\n"),
        [2]
    );
    let ok = "// SAFETY: P owns its allocation.\nunsafe impl Send for P {}\n";
    assert!(unsafe_lines(ok).is_empty());
}

#[test]
fn unsafe_fn_needs_safety_section() {
    assert_eq!(
        unsafe_lines("/// Reads.\npub unsafe fn read(p: *const u8) {}\n"),
        [2]
    );
    assert_eq!(unsafe_lines("pub unsafe fn read(p: *const u8) {}\n"), [1]);
    let documented = concat!(
        "/// Reads.\n",
        "///\n",
        "/// # Safety\n",
        "///\n",
        "/// - `p` is valid for reads.\n",
        "#[inline]\n",
        "pub(crate) unsafe fn read(p: *const u8) {}\n",
    );
    assert!(unsafe_lines(documented).is_empty());
    assert_eq!(
        unsafe_lines("/// No section.\npub unsafe extern \"C\" fn cb(x: u8) {}\n"),
        [2]
    );
}

#[test]
fn unsafe_fn_in_trait_impl_is_exempt_but_not_in_inherent_impl() {
    let trait_impl = concat!(
        "// SAFETY: Buf is plain memory.\n",
        "unsafe impl<T: Copy> RawBuffer for Buf<T> {\n",
        "    unsafe fn ptr(&self) -> *const u8 { self.p }\n",
        "}\n",
        "impl<'a, T> Backend for Cpu<'a, T> where T: Send {\n",
        "    unsafe fn launch(&self) {}\n",
        "}\n",
    );
    assert!(
        unsafe_lines(trait_impl).is_empty(),
        "{:?}",
        check_unsafe(trait_impl)
    );
    let inherent = "impl Buf {\n    pub unsafe fn ptr(&self) -> *const u8 { self.p }\n}\n";
    assert_eq!(unsafe_lines(inherent), [2]);
    // A higher-ranked bound is not `impl Trait for`.
    let hrtb = "impl<F: for<'a> Fn(&'a u8)> Wrap<F> {\n    pub unsafe fn go(&self) {}\n}\n";
    assert_eq!(unsafe_lines(hrtb), [2]);
    // Trait declarations define the contract, so their unsafe fns need docs.
    let decl = "pub trait Raw {\n    /// Doc.\n    unsafe fn ptr(&self) -> *const u8;\n}\n";
    assert_eq!(unsafe_lines(decl), [3]);
}

#[test]
fn unsafe_trait_needs_safety_section() {
    assert_eq!(
        unsafe_lines("/// Raw memory.\npub unsafe trait Raw {}\n"),
        [2]
    );
    let ok =
        "/// Raw memory.\n///\n/// # Safety\n///\n/// - ptr is valid.\npub unsafe trait Raw {}\n";
    assert!(unsafe_lines(ok).is_empty());
}

#[test]
fn unsafe_inside_macro_rules_counts() {
    let src = concat!(
        "macro_rules! impl_pod {\n",
        "    ($t:ty) => {\n",
        "        unsafe impl Pod for $t {}\n",
        "        fn f() { unsafe { g() } }\n",
        "    };\n",
        "}\n",
    );
    assert_eq!(unsafe_lines(src), [3, 4]);
}

#[test]
fn braces_in_char_literals_do_not_confuse_block_tracking() {
    let src = concat!(
        "impl Display for X {\n",
        "    fn fmt(&self) { let _ = ('{', '\\'', b'}'); }\n",
        "}\n",
        "impl X {\n",
        "    pub unsafe fn raw(&self) {}\n",
        "}\n",
    );
    assert_eq!(unsafe_lines(src), [5]);
}

#[test]
fn unwrap_and_expect_are_flagged_in_library_code() {
    let src = concat!(
        "//! Docs.\n",
        "fn f() {\n",
        "    let a = g().unwrap();\n",
        "    let b = g().expect(\"always there\");\n",
        "    let c = g().unwrap_or(0);\n",
        "    let d = g().unwrap_or_else(|| 0).unwrap_or_default();\n",
        "    let e = g().expect_err(\"ok in non-test code? it panics too, but is rare\");\n",
        "}\n",
    );
    assert_eq!(unwrap_lines(src), [3, 4]);
}

#[test]
fn unwrap_in_comments_strings_allowed_lines_and_tests_is_fine() {
    let src = concat!(
        "//! Docs.\n",
        "/// ```\n",
        "/// let x = ctx.alloc(4).unwrap();\n",
        "/// ```\n",
        "fn f() {\n",
        "    // we never .unwrap() here\n",
        "    let msg = \"call .unwrap() and .expect( yourself\";\n",
        "    let n = v.len().checked_sub(1).unwrap(); // tidy: allow(unwrap) len > 0 above\n",
        "    let m = x; // not .unwrap()\n",
        "    #[cfg(test)]\n",
        "    let y = g().unwrap();\n",
        "}\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "    fn t() { g().unwrap(); }\n",
        "}\n",
    );
    assert_eq!(unwrap_lines(src), [11]);
}

#[test]
fn library_source_is_crates_src_minus_tests() {
    assert!(is_library_source("crates/gpu-core/src/lib.rs"));
    assert!(is_library_source("crates/gpu-core/src/ops/add.rs"));
    assert!(!is_library_source("crates/gpu-core/src/tests.rs"));
    assert!(!is_library_source("crates/gpu-core/src/tests/ops.rs"));
    assert!(!is_library_source("crates/gpu-core/tests/ops.rs"));
    assert!(!is_library_source("crates/gpu-core/benches/b.rs"));
    assert!(!is_library_source("examples/context_basic.rs"));
    assert!(!is_library_source("xtask/src/main.rs"));
}

#[test]
fn check_file_combines_rules_by_path() {
    let src = "fn f() { g().unwrap(); unsafe { h() } }\n";
    let library = check_file("crates/gpu-core/src/lib.rs", src);
    assert_eq!(library.len(), 3, "{library:?}");
    let example = check_file("examples/basic.rs", src);
    assert_eq!(example.len(), 2, "{example:?}");
}

#[test]
fn code_only_blanks_comments_and_literals_but_keeps_lines() {
    let src = "a /* x /* nested */ y */ b // c\n\"s\\\"t\" r##\"q\"#\"## 'c' '\\n' &'a T\n";
    let code = code_only(src);
    assert_eq!(code.lines().count(), src.lines().count());
    assert_eq!(code.chars().count(), src.chars().count());
    let words: Vec<&str> = code.split_whitespace().collect();
    assert_eq!(
        words,
        ["a", "b", "\"", "\"", "r##\"", "\"##", "'", "'", "'", "'", "&'a", "T"]
    );
}

#[test]
fn raw_identifiers_are_not_raw_strings() {
    let code = code_only("let r#type = 1; unsafe { x }\n");
    assert!(code.contains("unsafe { x }"));
}
