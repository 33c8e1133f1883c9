//! Generic kernels: `fn k<T: Float>(..)` is compiled once per type of its bound (`Float`:
//! f32 and f64; `Numeric`: every element type `#[kernel]` has), each instantiation the
//! function with `T` replaced by the type, and the spec of the type asked for is chosen at
//! run time.

use proc_macro2::{Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Error, Result};

/// A kernel's type parameter: its name, the bound's name and the types it ranges over.
pub struct Generic {
    pub ident: syn::Ident,
    /// `KernelFloat` or `KernelNumeric`, the sealed traits of gpukit-core.
    pub bound: &'static str,
    pub types: &'static [&'static str],
}

const FLOATS: &[&str] = &["f32", "f64", "f16", "bf16"];
const NUMERIC: &[&str] = &[
    "f32", "f64", "i32", "u32", "i64", "u64", "u8", "i8", "f16", "bf16",
];

/// Whether `ty` is a 16-bit float: an instantiation for it computes in f32.
pub fn is_half(ty: &str) -> bool {
    matches!(ty, "f16" | "bf16")
}

pub const USAGE: &str = "a generic #[kernel] has at most one type parameter, bounded by `Float` \
                     (f32, f64, f16, bf16) or `Numeric` (f32, f64, i32, u32, i64, u64, u8, i8, \
                     f16, bf16), and any \
                     compile-time parameters (`const B: usize`, also u32, i32, u64, i64, bool): \
                     `fn k<T: Float, const B: usize>(..)`, no lifetimes or `where`";

/// The kernel's type parameter, if it has one (its const parameters are the lowering's).
pub fn param(sig: &syn::Signature) -> Result<Option<Generic>> {
    let g = &sig.generics;
    if let Some(w) = &g.where_clause {
        return Err(Error::new_spanned(w, USAGE));
    }
    let mut types = Vec::new();
    for p in &g.params {
        match p {
            syn::GenericParam::Type(tp) => types.push(tp),
            syn::GenericParam::Const(_) => {}
            syn::GenericParam::Lifetime(l) => return Err(Error::new_spanned(l, USAGE)),
        }
    }
    let tp = match types[..] {
        [] => return Ok(None),
        [tp] => tp,
        _ => return Err(Error::new_spanned(g, USAGE)),
    };
    if tp.default.is_some() || tp.bounds.len() != 1 {
        return Err(Error::new_spanned(tp, USAGE));
    }
    let syn::TypeParamBound::Trait(t) = &tp.bounds[0] else {
        return Err(Error::new_spanned(tp, USAGE));
    };
    let name = t
        .path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let (bound, types) = match name.as_str() {
        "Float" | "KernelFloat" => ("KernelFloat", FLOATS),
        "Numeric" | "KernelNumeric" => ("KernelNumeric", NUMERIC),
        _ => return Err(Error::new_spanned(t, USAGE)),
    };
    Ok(Some(Generic {
        ident: tp.ident.clone(),
        bound,
        types,
    }))
}

/// The function with `tp` replaced by `ty` everywhere and without its type parameter (its
/// const parameters stay). For f16 and bf16, `tp` is the 16-bit type in the parameters
/// (arrays of it, and scalars) and `f32`, the type they are computed in, in the body.
pub fn substitute(f: &syn::ItemFn, tp: &syn::Ident, ty: &str) -> Result<syn::ItemFn> {
    let compute = if is_half(ty) { "f32" } else { ty };
    let mut sub: syn::ItemFn = syn::parse2(replace(f.to_token_stream(), tp, compute))?;
    if compute != ty {
        let inputs = replace(f.sig.inputs.to_token_stream(), tp, ty);
        sub.sig.inputs =
            syn::parse::Parser::parse2(syn::punctuated::Punctuated::parse_terminated, inputs)?;
    }
    sub.sig.generics.params = consts(&f.sig.generics).into_iter().cloned().collect();
    Ok(sub)
}

/// The const parameters of `g`, as generic parameters.
pub fn consts(g: &syn::Generics) -> Vec<&syn::GenericParam> {
    g.params
        .iter()
        .filter(|p| matches!(p, syn::GenericParam::Const(_)))
        .collect()
}

fn replace(tokens: TokenStream, tp: &syn::Ident, ty: &str) -> TokenStream {
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Ident(id) if id == *tp => {
                TokenTree::Ident(proc_macro2::Ident::new(ty, id.span()))
            }
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), replace(g.stream(), tp, ty));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            other => other,
        })
        .collect()
}

/// Whether `tokens` name `tp`.
pub fn mentions(tokens: TokenStream, tp: &syn::Ident) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(id) => id == *tp,
        TokenTree::Group(g) => mentions(g.stream(), tp),
        _ => false,
    })
}
