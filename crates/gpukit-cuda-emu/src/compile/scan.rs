//! Reading a program's source: its kernels, and the rewrites the device header cannot do.

use std::fmt::Write as _;

/// The source with comments and string and character literals blanked (same length, same
/// lines), for scanning declarations.
pub(super) fn blank(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                for c in out.iter_mut().take(end).skip(i) {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        out[i] = b' ';
                        i += 1;
                    }
                    if i < b.len() {
                        out[i] = b' ';
                    }
                    i += 1;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Occurrences of the token `word` in blanked text.
fn tokens<'a>(text: &'a [u8], word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let w = word.as_bytes();
    (0..text.len().saturating_sub(w.len() - 1)).filter(move |&i| {
        &text[i..i + w.len()] == w
            && (i == 0 || !is_ident(text[i - 1]))
            && text.get(i + w.len()).is_none_or(|&c| !is_ident(c))
    })
}

/// The index just past the parenthesised group starting at `open` (`text[open] == b'('`).
pub(super) fn skip_parens(text: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (i, &c) in text.iter().enumerate().skip(open) {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// The `__global__` functions of a program (not templates), in order, each once.
pub(super) fn kernel_names(text: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for at in tokens(text, "__global__") {
        // A template's declaration starts after the previous `;`, `{` or `}`.
        let start = text[..at]
            .iter()
            .rposition(|&c| matches!(c, b';' | b'{' | b'}'))
            .map_or(0, |p| p + 1);
        if tokens(&text[start..at], "template").next().is_some() {
            continue;
        }
        let mut i = at + "__global__".len();
        let mut last_ident: Option<(usize, usize)> = None;
        while i < text.len() {
            let c = text[i];
            if is_ident(c) {
                let s = i;
                while i < text.len() && is_ident(text[i]) {
                    i += 1;
                }
                last_ident = Some((s, i));
                continue;
            }
            if c == b'(' {
                let Some((s, e)) = last_ident else { break };
                let ident = std::str::from_utf8(&text[s..e]).unwrap_or("");
                if matches!(
                    ident,
                    "__launch_bounds__" | "__attribute__" | "__align__" | "alignas" | "__declspec"
                ) {
                    i = skip_parens(text, i);
                    last_ident = None;
                    continue;
                }
                if !names.iter().any(|n| n == ident) {
                    names.push(ident.to_string());
                }
                break;
            }
            if c == b';' || c == b'{' {
                break;
            }
            i += 1;
        }
    }
    names
}

/// Rewrites `extern __shared__ T name[];` into `gkemu_dyn_shared<T> name;` (keeping lines).
pub(super) fn rewrite_dynamic_shared(src: &str, text: &[u8]) -> String {
    let mut out = src.to_string();
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for at in tokens(text, "__shared__") {
        let before = text[..at].iter().rposition(|&c| !c.is_ascii_whitespace());
        let Some(b) = before else { continue };
        if b < 5 || &text[b - 5..=b] != b"extern" {
            continue;
        }
        let start = b - 5;
        let Some(semi) = text[at..].iter().position(|&c| c == b';').map(|p| at + p) else {
            continue;
        };
        let decl = &src[at + "__shared__".len()..semi];
        let Some(bracket) = decl.rfind('[') else {
            continue;
        };
        let head = decl[..bracket].trim_end();
        let name_start = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let name = &head[name_start..];
        let mut ty = head[..name_start].to_string();
        // Alignment attributes say nothing the runtime's 256-byte alignment does not give.
        for attr in ["__align__", "__attribute__", "alignas"] {
            while let Some(p) = ty.find(attr) {
                let open = ty[p..].find('(').map(|o| p + o);
                let end = open.map_or(ty.len(), |o| o + skip_parens(&ty.as_bytes()[o..], 0));
                ty.replace_range(p..end, "");
            }
        }
        let newlines = src[start..=semi].matches('\n').count();
        let replacement = format!(
            "gkemu_dyn_shared<{}> {name};{}",
            ty.trim(),
            "\n".repeat(newlines)
        );
        edits.push((start, semi + 1, replacement));
    }
    for (s, e, r) in edits.into_iter().rev() {
        out.replace_range(s..e, &r);
    }
    out
}

/// The name a kernel has in the compiled program: kernels are renamed (with a `#define`
/// before the source) so that one named like a C library function (`random`, `index`,
/// `remove`: NVRTC has no C library) does not clash with the declaration the host's headers
/// make.
pub(super) fn renamed(kernel: &str) -> String {
    format!("gkemu_k_{kernel}")
}

/// The trampolines and module table appended to a program with these kernels.
pub(super) fn trampolines(names: &[String]) -> String {
    let mut s = String::from(
        "\n#include <utility>\n#include <type_traits>\nnamespace gkemu_gen {\n\
         template <typename... A, unsigned long... I> __attribute__((no_sanitize(\"thread\"))) static void call(void (*f)(A...), void **p, std::integer_sequence<unsigned long, I...>) { f(*static_cast<std::remove_reference_t<A> *>(p[I])...); }\n\
         template <typename... A> __attribute__((no_sanitize(\"thread\"))) static void entry(void (*f)(A...), void **p) { call(f, p, std::make_integer_sequence<unsigned long, sizeof...(A)>{}); }\n\
         template <typename... A> struct sig { static constexpr unsigned int n = sizeof...(A); static constexpr unsigned int size[sizeof...(A) + 1] = {(unsigned int)sizeof(A)..., 0u}; static constexpr unsigned int align[sizeof...(A) + 1] = {(unsigned int)alignof(A)..., 0u}; };\n\
         template <typename... A> static sig<A...> sig_of(void (*)(A...));\n\
         }\n",
    );
    for (i, n) in names.iter().enumerate() {
        let _ = writeln!(
            s,
            "__attribute__((no_sanitize(\"thread\"))) static void gkemu_entry_{i}(void **p) {{ gkemu_gen::entry(&{}, p); }}",
            renamed(n)
        );
    }
    s.push_str("static const gkemu_kernel_info gkemu_kernels[] = {\n");
    for (i, n) in names.iter().enumerate() {
        let sig = format!("decltype(gkemu_gen::sig_of(&{}))", renamed(n));
        let _ = writeln!(
            s,
            "    {{\"{n}\", &gkemu_entry_{i}, {sig}::n, {sig}::size, {sig}::align}},"
        );
    }
    if names.is_empty() {
        s.push_str("    {\"\", nullptr, 0, nullptr, nullptr},\n");
    }
    let _ = write!(
        s,
        "}};\n\
         static int gkemu_launch_fn(gkemu_launch *l) {{ return gkemu_rt_launch(l, gkemu_kernels, {n}u); }}\n\
         extern \"C\" __attribute__((visibility(\"default\"))) const gkemu_module_info gkemu_module = {{GKEMU_ABI_VERSION, {n}u, gkemu_kernels, &gkemu_launch_fn, &gkemu_rt_escape}};\n",
        n = names.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_found_and_templates_skipped() {
        let src = r#"
// __global__ void in_comment() {}
extern "C" __global__ void __launch_bounds__(256) fill(float *x, int n) { }
extern "C" __global__ void axpy(float a, const float* __restrict__ x) ;
extern "C" __global__ void axpy(float a, const float* __restrict__ x) { }
template <typename T> __global__ void generic(T *x) {}
const char *s = "__global__ void in_string()";
"#;
        assert_eq!(kernel_names(&blank(src)), ["fill", "axpy"]);
    }

    #[test]
    fn dynamic_shared_memory_is_rewritten_keeping_lines() {
        let src = "extern __shared__ __align__(16) float tile[];\nextern\n __shared__ int x[];\n__shared__ float s[4];";
        let out = rewrite_dynamic_shared(src, &blank(src));
        assert!(out.starts_with("gkemu_dyn_shared<float> tile;\n"), "{out}");
        assert!(out.contains("gkemu_dyn_shared<int> x;"), "{out}");
        assert!(out.contains("__shared__ float s[4];"));
        assert_eq!(out.matches('\n').count(), src.matches('\n').count());
    }
}
