//! `#[kernel]`: a GPU kernel written once, as a plain Rust function, compiled to CUDA C,
//! WGSL and a CPU twin with the same semantics, every access bounds-checked.
//!
//! Use it through the facade, `gpukit::kernel`; the facade's chapter "Kernels written in
//! Rust" describes the language, the intrinsics and the bounds-check contract. This crate
//! is the compiler's front end: `lower` checks the function and types it into the IR of
//! gpukit-kernel, whose emitters (`cuda`, `wgsl`, `twin`) generate the three targets.
//!
//! The expansion of `#[kernel] fn name(params) { body }` is a function `name()` returning
//! the kernel's `KernelSpec`, whose signature is the parameters' types (`&[T]` is `In<T>`,
//! `&mut [T]` is `Out<T>`, a scalar is itself). It names `::gpukit`: depend on the facade.

use proc_macro::TokenStream;
use quote::{format_ident, quote, ToTokens};

use gpukit_kernel::{cuda, ir, twin, wgsl};

mod generic;
mod lower;
#[cfg(test)]
mod wgsl_tests;

/// Compiles a Rust function to a GPU kernel: CUDA C, WGSL and a CPU twin with the same
/// semantics, every array access bounds-checked, so launching it is safe.
///
/// `#[kernel] fn name(params) { body }` becomes `fn name() -> KernelSpec<Sig>`, where `Sig`
/// is the parameters' types in order (`&[T]` is `In<T>`, `&mut [T]` is `Out<T>`, a scalar is
/// itself). The function's visibility and attributes (its docs) carry over. A kernel generic
/// over its element type (`fn k<T: Float>(..)`, or `T: Numeric`) is compiled for every type
/// of the bound and becomes `fn k<T: KernelFloat>() -> KernelSpec<Sig>` (`KernelNumeric`).
/// Beside it, the loaded kernel's type gets a name, for a struct's field or a function's
/// parameter: `type NameKernel<B = AnyBackend> = Kernel<Sig, B>` (`tiled_gemm` ->
/// `TiledGemmKernel`; a generic kernel's takes its element type first, `KKernel<T>`;
/// compile-time constants are not part of it).
///
/// ```
/// use gpukit::{kernel, Context, DeviceSpec, LaunchConfig};
///
/// #[kernel]
/// fn add_one<T: Numeric>(x: &mut [T]) {
///     let i = global_x();
///     if i < x.len() {
///         x[i] += 1; // 1 of type T, for every T
///     }
/// }
///
/// # fn main() -> gpukit::Result<()> {
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let mut x = ctx.alloc_upload(&[1u8, 255])?;
/// ctx.launch(&ctx.kernel(add_one::<u8>())?, LaunchConfig::for_elems(2), (&mut x,))?;
/// assert_eq!(x.download()?, [2, 0]); // wrapping, as on every backend
/// # Ok(())
/// # }
/// ```
///
/// ```
/// use gpukit::{kernel, Context, DeviceSpec, LaunchConfig};
///
/// #[kernel]
/// fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
///     let i = global_x();
///     if i < y.len() {
///         y[i] += a * x[i];
///     }
/// }
///
/// # fn main() -> gpukit::Result<()> {
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let k = ctx.kernel(saxpy())?;
/// let x = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
/// let mut y = ctx.alloc_upload(&[10.0f32, 20.0, 30.0])?;
/// ctx.launch(&k, LaunchConfig::for_elems(3), (2.0f32, &x, &mut y))?;
/// assert_eq!(y.download()?, [12.0, 24.0, 36.0]);
/// assert!(saxpy().cuda_source().unwrap().contains("extern \"C\" __global__ void saxpy("));
/// # Ok(())
/// # }
/// ```
///
/// The language (statements, expressions, intrinsics: `global_x()`, `thread_x()`,
/// `block_x()`, `block_dim_x()`, `grid_dim_x()` and their `_y`, `_z`; `barrier()`;
/// `shared::<T, N>()`; `atomic_add`/`min`/`max`/`exchange`/`cas`), the bounds-check contract
/// (an access outside an array is not made and becomes `Error::KernelFailed` at the next
/// sync, on every backend), what it cannot rule out (data races inside a launch) and what
/// runs where are described in the facade's chapter "Kernels written in Rust".
///
/// Anything outside the language is a compile error at its span:
///
/// ```compile_fail
/// #[gpukit::kernel]
/// fn sum(x: &[f32], out: &mut [f32]) {
///     out[0] = x.iter().sum(); // error: no method `sum` in a #[kernel]; ...
/// }
/// ```
///
/// ```compile_fail
/// #[gpukit::kernel]
/// fn index(x: &mut [f32], i: u32) {
///     x[i] = 1.0; // error: an index is a `usize`, found u32 (cast it: `as usize`)
/// }
/// ```
///
/// Every thread of a block must reach the same barriers and subgroup collectives, so the
/// control flow around one may depend only on what the whole block shares (kernel
/// arguments, lengths, `block_x()`, constants), not on the thread or on memory:
///
/// ```compile_fail
/// #[gpukit::kernel]
/// fn divergent(out: &mut [u32]) {
///     if thread_x() < 2 {
///         barrier(); // error: `barrier()` or a subgroup collective inside a `if` whose
///                    // condition may differ between the threads of a block ...
///     }
/// }
/// ```
///
/// A device function, `#[kernel(device)]`, is a function of scalars returning a scalar
/// that kernels (and other device functions) call: it stays an ordinary Rust function (on
/// the host and in CPU twins) and its CUDA C and WGSL are linked into each kernel that calls
/// it. A call's argument and result types come from the call (an unsuffixed literal
/// argument takes the type of the first typed one); the compiler checks them against the
/// function's signature there.
///
/// ```
/// use gpukit::{kernel, Context, DeviceSpec, LaunchConfig};
///
/// #[kernel(device)]
/// fn hypot(a: f32, b: f32) -> f32 {
///     (a * a + b * b).sqrt()
/// }
///
/// #[kernel]
/// fn norms(a: &[f32], b: &[f32], out: &mut [f32]) {
///     let i = global_x();
///     if i < out.len() {
///         out[i] = hypot(a[i], b[i]);
///     }
/// }
///
/// # fn main() -> gpukit::Result<()> {
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let (a, b) = (ctx.alloc_upload(&[3.0f32, 5.0])?, ctx.alloc_upload(&[4.0f32, 12.0])?);
/// let mut out = ctx.alloc_zeros::<f32>(2)?;
/// ctx.launch(&ctx.kernel(norms())?, LaunchConfig::for_elems(2), (&a, &b, &mut out))?;
/// assert_eq!(out.download()?, [5.0, 13.0]);
/// assert_eq!(hypot(3.0, 4.0), 5.0); // an ordinary function on the host too
/// # Ok(())
/// # }
/// ```
///
/// ```compile_fail,E0308
/// #[gpukit::kernel(device)]
/// fn half(x: f64) -> f64 {
///     x * 0.5
/// }
///
/// #[gpukit::kernel]
/// fn halves(x: &mut [f32]) {
///     let i = global_x();
///     if i < x.len() {
///         x[i] = half(x[i]); // error: `half` takes an f64, not an f32
///     }
/// }
/// ```
///
/// and the launch's arguments must match the parameters' types:
///
/// ```compile_fail,E0271
/// # use gpukit::{kernel, Context, DeviceSpec, LaunchConfig};
/// #[kernel]
/// fn twice(x: &mut [f32]) {
///     let i = global_x();
///     if i < x.len() {
///         x[i] *= 2.0;
///     }
/// }
/// # fn main() -> gpukit::Result<()> {
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let k = ctx.kernel(twice())?;
/// let mut ints = ctx.alloc_zeros::<i32>(4)?;
/// ctx.launch(&k, LaunchConfig::for_elems(4), (&mut ints,))?; // an i32 array for `&mut [f32]`
/// # Ok(())
/// # }
/// ```
///
/// ```compile_fail,E0271
/// # use gpukit::{kernel, Context, DeviceSpec, LaunchConfig};
/// # #[kernel]
/// # fn twice(x: &mut [f32]) {
/// #     let i = global_x();
/// #     if i < x.len() {
/// #         x[i] *= 2.0;
/// #     }
/// # }
/// # fn main() -> gpukit::Result<()> {
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let k = ctx.kernel(twice())?;
/// let x = ctx.alloc_zeros::<f32>(4)?;
/// ctx.launch(&k, LaunchConfig::for_elems(4), (&x,))?; // read-only where it writes
/// # Ok(())
/// # }
/// ```
///
/// `#[kernel(core = "path")]` names gpukit-core by `path` instead of `::gpukit::core`, for
/// kernels defined where the facade is not a dependency (gpukit-core's built-in ops say
/// `core = "crate"`).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The three sources of a kernel, as strings: what `#[kernel]` generates, for tests and
/// review.
pub(crate) struct Sources {
    pub cuda: String,
    pub wgsl: Result<String, &'static str>,
    /// Without the bounds checks, for `KernelSpec::unchecked`.
    pub cuda_unchecked: String,
    pub wgsl_unchecked: Option<String>,
    /// The WGSL for adapters without subgroups, checked and unchecked (`None` for a kernel
    /// without subgroup operations).
    pub wgsl_without_subgroups: (Option<String>, Option<String>),
    pub twin: String,
    /// Where each device function is first called.
    pub call_spans: Vec<proc_macro2::Span>,
}

pub(crate) fn sources(f: &syn::ItemFn, generic: bool) -> syn::Result<(ir::Kernel, Sources)> {
    let (k, call_spans) = lower::lower_spanned(f, generic, false)?;
    let s = Sources {
        cuda: cuda::generate(&k, true),
        wgsl: wgsl::generate(&k, true),
        cuda_unchecked: cuda::generate(&k, false),
        wgsl_unchecked: wgsl::generate(&k, false).ok(),
        wgsl_without_subgroups: (
            wgsl::generate_without_subgroups(&k, true).and_then(Result::ok),
            wgsl::generate_without_subgroups(&k, false).and_then(Result::ok),
        ),
        twin: twin::generate(&k),
        call_spans,
    };
    Ok((k, s))
}

/// What `#[kernel(..)]` was given: `device`, and `core = "path"`, the path its expansion
/// names gpukit-core by (`::gpukit::core` unless given: gpukit-core's own built-in kernels
/// say `core = "crate"`).
struct Options {
    device: bool,
    core: Option<syn::Path>,
}

const OPTIONS_USAGE: &str = "#[kernel] takes no arguments, or `device` (#[kernel(device)]: a      function kernels call), or `core = \"path\"` (the path of gpukit-core, for kernels      defined where `::gpukit` is not a dependency)";

fn options(attr: proc_macro2::TokenStream) -> syn::Result<Options> {
    use syn::punctuated::Punctuated;
    let mut o = Options {
        device: false,
        core: None,
    };
    let metas = syn::parse::Parser::parse2(
        Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
        attr.clone(),
    )
    .map_err(|_| syn::Error::new_spanned(&attr, OPTIONS_USAGE))?;
    for m in metas {
        match &m {
            syn::Meta::Path(p) if p.is_ident("device") && !o.device => o.device = true,
            syn::Meta::NameValue(nv) if nv.path.is_ident("core") && o.core.is_none() => {
                let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                else {
                    return Err(syn::Error::new_spanned(&nv.value, OPTIONS_USAGE));
                };
                o.core = Some(
                    s.parse()
                        .map_err(|_| syn::Error::new_spanned(s, OPTIONS_USAGE))?,
                );
            }
            _ => return Err(syn::Error::new_spanned(&m, OPTIONS_USAGE)),
        }
    }
    Ok(o)
}

/// The expansion with `::gpukit::core` replaced by `core` and `::gpukit::half` by
/// `core::half` (gpukit-core's re-export).
fn rooted_at(ts: proc_macro2::TokenStream, core: &syn::Path) -> proc_macro2::TokenStream {
    use proc_macro2::{Group, TokenTree};
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = proc_macro2::TokenStream::new();
    let mut i = 0;
    let is_colons = |t: &[TokenTree]| match t {
        [TokenTree::Punct(a), TokenTree::Punct(b), ..] => a.as_char() == ':' && b.as_char() == ':',
        _ => false,
    };
    let is_ident =
        |t: Option<&TokenTree>, name: &str| matches!(t, Some(TokenTree::Ident(x)) if x == name);
    while i < toks.len() {
        // `:: gpukit :: core` is four tokens of punctuation and two identifiers.
        if is_colons(&toks[i..])
            && is_ident(toks.get(i + 2), "gpukit")
            && is_colons(&toks[(i + 3).min(toks.len())..])
        {
            if is_ident(toks.get(i + 5), "core") {
                out.extend(core.to_token_stream());
                i += 6;
                continue;
            }
            if is_ident(toks.get(i + 5), "half") {
                out.extend(quote!(#core::half));
                i += 6;
                continue;
            }
        }
        match &toks[i] {
            TokenTree::Group(g) => {
                let mut ng = Group::new(g.delimiter(), rooted_at(g.stream(), core));
                ng.set_span(g.span());
                out.extend([TokenTree::Group(ng)]);
            }
            t => out.extend([t.clone()]),
        }
        i += 1;
    }
    out
}

fn expand(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let o = options(attr)?;
    // The loaded kernel's type names the facade's backend: not inside gpukit's own crates.
    let out = expand_with(o.device, o.core.is_none(), item)?;
    Ok(match &o.core {
        Some(core) => rooted_at(out, core),
        None => out,
    })
}

/// The name of a kernel's loaded type: `tiled_gemm` -> `TiledGemmKernel`.
fn loaded_name(name: &syn::Ident) -> syn::Ident {
    let camel: String = name
        .to_string()
        .trim_start_matches("r#")
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect();
    format_ident!("{}Kernel", camel, span = name.span())
}

/// `type NameKernel<[T,] B = AnyBackend> = Kernel<Sig, B>;`: the loaded kernel's type, to
/// name in a struct's field or a function's parameter (allowed to go unused).
fn loaded_alias(
    vis: &syn::Visibility,
    name: &syn::Ident,
    tp: Option<&syn::Ident>,
    sig: &proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    let alias = loaded_name(name);
    let doc = format!(
        " The loaded `#[kernel]` `{name}`: what `ctx.kernel({name}())?` returns on the facade's \
         `Context` (`B`: a backend of `gpukit::core`'s own contexts)."
    );
    let tp = tp.map(|t| quote!(#t,));
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis type #alias<#tp B = ::gpukit::AnyBackend> = ::gpukit::core::Kernel<#sig, B>;
    }
}

fn expand_with(
    is_device: bool,
    alias: bool,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let f: syn::ItemFn = syn::parse2(item)?;
    if is_device {
        return device(&f);
    }
    let name = &f.sig.ident;
    let vis = &f.vis;
    let attrs = &f.attrs;
    let has_doc = attrs.iter().any(|a| a.path().is_ident("doc"));
    let doc = (!has_doc).then(|| {
        let d =
            format!(" The `#[kernel]` `{name}`: its `KernelSpec`, to load with `Context::kernel`.");
        quote!(#[doc = #d])
    });
    let consts = generic::consts(&f.sig.generics);
    let Some(generic) = generic::param(&f.sig)? else {
        let (k, src) = sources(&f, false)?;
        let sig = signature(&k, None);
        let body = instantiation(&f, &k, &src, None)?;
        let loaded = alias.then(|| loaded_alias(vis, name, None, &sig));
        return Ok(quote! {
            #(#attrs)*
            #doc
            #vis fn #name<#(#consts),*>() -> ::gpukit::core::KernelSpec<#sig> {
                #body
            }
            #loaded
        });
    };
    // One instantiation per type of the bound, chosen at run time by the type asked for.
    let tp = &generic.ident;
    let bound = format_ident!("{}", generic.bound);
    let mut arms = Vec::new();
    let mut generic_sig = None;
    let mut uses_tp = false;
    for ty in generic.types {
        let fi = generic::substitute(&f, tp, ty)?;
        let (k, src) = sources(&fi, true).map_err(|e| {
            syn::Error::new(
                e.span(),
                format!(
                    "{e} (in the instantiation `{tp} = {ty}`: the body must compile for every \
                     type of `{tp}: {}`; narrow the bound, e.g. `{tp}: Float`, if it needs float \
                     methods)",
                    generic.bound
                ),
            )
        })?;
        if generic_sig.is_none() {
            let uses: Vec<bool> = f
                .sig
                .inputs
                .iter()
                .map(|p| generic::mentions(p.to_token_stream(), tp))
                .collect();
            uses_tp = uses.contains(&true);
            generic_sig = Some(signature(&k, Some((tp, &uses))));
        }
        let sig = generic_sig.as_ref().expect("set above");
        let arm = instantiation(&fi, &k, &src, Some(sig))?;
        let arm = quote! {
            {
                if let ::core::option::Option::Some(spec) = { #arm } {
                    return spec;
                }
            }
        };
        // f16 and bf16 exist where gpukit-core has its feature `half`.
        arms.push(match generic::is_half(ty) {
            true => quote!(::gpukit::core::__if_half! { #arm }),
            false => arm,
        });
    }
    let sig = generic_sig.unwrap_or_default();
    let name_str = name.to_string();
    let loaded = alias.then(|| loaded_alias(vis, name, uses_tp.then_some(tp), &sig));
    Ok(quote! {
        #(#attrs)*
        #doc
        #vis fn #name<#tp: ::gpukit::core::#bound, #(#consts),*>() -> ::gpukit::core::KernelSpec<#sig> {
            #(#arms)*
            // Unreachable: the bound is sealed to the types above.
            ::gpukit::core::KernelSpec::named(#name_str)
        }
        #loaded
    })
}

/// A device function: the function itself (what it is on the host and in CPU twins), and
/// beside it, in a module of the same name, its generated code for the kernels that call it.
fn device(f: &syn::ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let (k, spans) = lower::lower_spanned(f, false, true)?;
    let body: proc_macro2::TokenStream = twin::device_body(&k).parse().map_err(|e| {
        syn::Error::new_spanned(
            &f.sig.ident,
            format!("internal error: the function's Rust does not parse: {e}"),
        )
    })?;
    let cuda = cuda::device(&k);
    let wgsl = match wgsl::device(&k) {
        Ok(w) => quote!(::core::option::Option::Some(#w)),
        Err(_) => quote!(::core::option::Option::None),
    };
    let deps = k.calls.iter().map(|c| callee_path(c, true));
    let calls = callee_checks(&k, &spans);
    let (attrs, vis, sig, name) = (&f.attrs, &f.vis, &f.sig, &f.sig.ident);
    let name_str = name.to_string();
    Ok(quote! {
        #(#attrs)*
        #[allow(unused_parens, unused_braces, clippy::all)]
        #vis #sig {
            #(#calls)*
            #body
        }

        /// The generated code of the device function of the same name.
        #[doc(hidden)]
        #vis mod #name {
            /// Its CUDA C and WGSL, linked into each kernel that calls it.
            pub const DEVICE: ::gpukit::core::DeviceFn = ::gpukit::core::DeviceFn {
                name: #name_str,
                cuda: #cuda,
                wgsl: #wgsl,
                deps: &[#(&#deps::DEVICE),*],
            };
        }
    })
}

/// The path of a called device function's module; `from_module`: as seen from inside the
/// module a device function generates (one level down).
fn callee_path(c: &ir::Callee, from_module: bool) -> proc_macro2::TokenStream {
    let rooted = c.path.starts_with("crate::") || c.path.starts_with("::");
    let path = if from_module && !rooted {
        match c.path.strip_prefix("self::") {
            Some(rest) => format!("super::{rest}"),
            None => format!("super::{}", c.path),
        }
    } else {
        c.path.clone()
    };
    path.parse().unwrap_or_default()
}

/// For each device function called: that it has the signature the calls assume, checked by
/// the compiler at the first call.
fn callee_checks(k: &ir::Kernel, spans: &[proc_macro2::Span]) -> Vec<proc_macro2::TokenStream> {
    k.calls
        .iter()
        .zip(spans)
        .map(|(c, &span)| {
            let path = callee_path(c, false);
            let args = c.args.iter().map(|t| format_ident!("{}", t.rust()));
            let ret = format_ident!("{}", c.ret.rust());
            quote::quote_spanned! {span=>
                let _: fn(#(#args),*) -> #ret = #path;
            }
        })
        .collect()
}

/// The kernel's signature tuple; `generic: (T, uses)` writes the element type of the
/// parameters whose declared type mentions `T` (`uses[i]`) as `T`.
fn signature(k: &ir::Kernel, generic: Option<(&syn::Ident, &[bool])>) -> proc_macro2::TokenStream {
    let sig = k.params.iter().enumerate().map(|(i, p)| {
        let t = match generic {
            Some((tp, uses)) if uses.get(i) == Some(&true) => quote!(#tp),
            _ => p.ty.rust_path().parse().unwrap_or_default(),
        };
        match p.kind {
            ir::ParamKind::Slice { mutable: true, .. } => quote!(::gpukit::core::Out<#t>),
            ir::ParamKind::Slice { mutable: false, .. } => quote!(::gpukit::core::In<#t>),
            ir::ParamKind::Scalar => quote!(#t),
        }
    });
    quote!((#(#sig,)*))
}

/// The expression building the spec of one kernel: `as_generic`, the generic signature it
/// is an instantiation of (then the expression is an `Option`).
fn instantiation(
    f: &syn::ItemFn,
    k: &ir::Kernel,
    src: &Sources,
    as_generic: Option<&proc_macro2::TokenStream>,
) -> syn::Result<proc_macro2::TokenStream> {
    let twin: proc_macro2::TokenStream = src.twin.parse().map_err(|e| {
        syn::Error::new_spanned(
            &f.sig.ident,
            format!("internal error: the CPU twin does not parse: {e}"),
        )
    })?;
    let name_str = k.name.clone();
    let cuda = &src.cuda;
    let (wgsl, no_wgsl) = match &src.wgsl {
        Ok(w) => (
            quote!(::core::option::Option::Some(#w)),
            quote!(::core::option::Option::None),
        ),
        Err(why) => (
            quote!(::core::option::Option::None),
            quote!(::core::option::Option::Some(#why)),
        ),
    };
    let cuda_unchecked = &src.cuda_unchecked;
    let opt = |w: &Option<String>| match w {
        Some(w) => quote!(::core::option::Option::Some(#w)),
        None => quote!(::core::option::Option::None),
    };
    let wgsl_unchecked = opt(&src.wgsl_unchecked);
    let (plain, plain_unchecked) = (
        opt(&src.wgsl_without_subgroups.0),
        opt(&src.wgsl_without_subgroups.1),
    );
    let arrays = k.array_names();
    let unchecked_faults = k.faults_unchecked();
    // The device functions it calls, linked in before its own code.
    let link = if k.calls.is_empty() {
        quote! {
            let (cuda, wgsl): (&str, ::core::option::Option<&str>) = (#cuda, #wgsl);
            let (cuda_unchecked, wgsl_unchecked): (&str, ::core::option::Option<&str>) =
                (#cuda_unchecked, #wgsl_unchecked);
            let without_subgroups: (::core::option::Option<&str>, ::core::option::Option<&str>) =
                (#plain, #plain_unchecked);
        }
    } else {
        let calls = k.calls.iter().map(|c| callee_path(c, false));
        let checks = callee_checks(k, &src.call_spans);
        quote! {
            #(#checks)*
            let calls: &[&'static ::gpukit::core::DeviceFn] = &[#(&#calls::DEVICE),*];
            let linked = ::gpukit::core::DeviceFn::link(#cuda, #wgsl, calls);
            let unlinked = ::gpukit::core::DeviceFn::link(#cuda_unchecked, #wgsl_unchecked, calls);
            let (cuda, wgsl) = (linked.0.as_str(), linked.1.as_deref());
            let (cuda_unchecked, wgsl_unchecked) = (unlinked.0.as_str(), unlinked.1.as_deref());
            let plain = ::gpukit::core::DeviceFn::link(#cuda, #plain, calls).1;
            let plain_unchecked = ::gpukit::core::DeviceFn::link(#cuda_unchecked, #plain_unchecked, calls).1;
            let without_subgroups = (plain.as_deref(), plain_unchecked.as_deref());
        }
    };
    // Each compile-time parameter's value written into the GPU code; the twin is generic
    // over them.
    let (comptime, twin_fn, twin_rc) = if k.comptime.is_empty() {
        (quote!(), quote!(__twin::<false>), quote!(__twin::<true>))
    } else {
        let names: Vec<_> = k
            .comptime
            .iter()
            .map(|c| format_ident!("{}", c.name))
            .collect();
        let (name_strs, tys): (Vec<_>, Vec<_>) = k
            .comptime
            .iter()
            .map(|c| (c.name.clone(), c.ty.rust()))
            .unzip();
        (
            quote! {
                let __values = [#(::std::string::ToString::to_string(&#names)),*];
                let __params: ::std::vec::Vec<(&str, &str, &str)> = [#((#name_strs, #tys)),*]
                    .iter()
                    .zip(&__values)
                    .map(|(&(n, t), v)| (n, t, v.as_str()))
                    .collect();
                let __with = |src: &str, cuda: bool| ::gpukit::core::__comptime(src, &__params, cuda);
                let __cuda = __with(cuda, true);
                let __cuda_unchecked = __with(cuda_unchecked, true);
                let __wgsl = wgsl.map(|w| __with(w, false));
                let __wgsl_unchecked = wgsl_unchecked.map(|w| __with(w, false));
                let __plain = without_subgroups.0.map(|w| __with(w, false));
                let __plain_unchecked = without_subgroups.1.map(|w| __with(w, false));
                let (cuda, wgsl) = (__cuda.as_str(), __wgsl.as_deref());
                let (cuda_unchecked, wgsl_unchecked) =
                    (__cuda_unchecked.as_str(), __wgsl_unchecked.as_deref());
                let without_subgroups = (__plain.as_deref(), __plain_unchecked.as_deref());
            },
            quote!(__twin::<false, #(#names),*>),
            quote!(__twin::<true, #(#names),*>),
        )
    };
    let constructor = match as_generic {
        None => quote!(::gpukit::core::KernelSpec::__generated),
        Some(generic) => {
            let concrete = signature(k, None);
            quote!(::gpukit::core::KernelSpec::<#generic>::__generated_as::<#concrete, _, _>)
        }
    };
    Ok(quote! {
        #twin
        #link
        #comptime
        let no_wgsl: ::core::option::Option<&'static str> = #no_wgsl;
        let no_wgsl = match (wgsl, no_wgsl) {
            (::core::option::Option::None, ::core::option::Option::None) => ::core::option::Option::Some(
                "a device function the kernel calls has no WGSL (a math function of an f64 that Vulkan lacks): run it on the CPU or CUDA backends",
            ),
            (_, why) => why,
        };
        // SAFETY: the CUDA C and WGSL were generated by `#[kernel]` from this function
        // (and the device functions it calls, which touch no memory): they take its
        // parameters in order, followed by the checked convention's arguments, check every
        // array access against the length passed with the array (or the shared array's
        // size) and report the first one out of bounds through the fault record instead of
        // making it, and write only `&mut [T]` parameters.
        unsafe {
            #constructor(
                #name_str,
                cuda,
                wgsl,
                ::gpukit::core::CheckedAbi {
                    arrays: ::std::vec![#(::std::string::String::from(#arrays)),*],
                    no_wgsl,
                    checks: true,
                    arity: 0,
                    unchecked_faults: #unchecked_faults,
                },
                (cuda_unchecked, wgsl_unchecked),
                without_subgroups,
                (#twin_fn, #twin_rc),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_src(src: &str) -> syn::Result<proc_macro2::TokenStream> {
        expand(
            proc_macro2::TokenStream::new(),
            src.parse().expect("tokens"),
        )
    }

    #[test]
    fn a_generic_kernel_is_compiled_for_every_type_of_its_bound() {
        let out = expand_src("fn scale<T: Float>(x: &mut [T], a: T) { x[0] *= a; }")
            .expect("expands")
            .to_string();
        assert!(out.contains("KernelFloat"), "{out}");
        assert_eq!(
            out.matches("__generated_as").count(),
            4,
            "f32, f64, f16, bf16"
        );
        // A 16-bit instantiation computes in f32: its scalar is an f16 in the signature.
        assert!(out.contains("half :: f16 ,"), "{out}");
        let out = expand_src("fn add1<T: Numeric>(x: &mut [T]) { x[0] += 1; }")
            .expect("expands")
            .to_string();
        assert_eq!(out.matches("__generated_as").count(), 10);
    }

    #[test]
    fn a_kernel_can_name_gpukit_core_by_another_path() {
        let attr: proc_macro2::TokenStream = r#"core = "crate""#.parse().expect("tokens");
        let src = "fn k<T: Numeric>(x: &mut [T]) { let s = subgroup_add(x[0]); x[0] = s; }";
        let out = expand(attr, src.parse().expect("tokens"))
            .expect("expands")
            .to_string();
        assert!(!out.contains("gpukit"), "{out}");
        assert!(out.contains("crate :: KernelSpec"), "{out}");
        assert!(out.contains("crate :: KernelNumeric"), "{out}");
        let out = expand(
            r#"device, core = "my::core""#.parse().expect("tokens"),
            "fn sq(x: f32) -> f32 { x * x }".parse().expect("tokens"),
        )
        .expect("expands")
        .to_string();
        assert!(out.contains("my :: core :: DeviceFn"), "{out}");
        for bad in [
            r#"core = crate"#,
            "device, device",
            "fast",
            r#"core = "1 +""#,
        ] {
            let e = expand(
                bad.parse().expect("tokens"),
                "fn f(x: &mut [f32]) {}".parse().expect("tokens"),
            )
            .expect_err(bad);
            assert!(e.to_string().contains("`device`"), "{bad}: {e}");
        }
    }

    #[test]
    fn device_functions_are_scalar_functions_without_a_thread() {
        let attr: proc_macro2::TokenStream = "device".parse().expect("tokens");
        let dev = |src: &str| expand(attr.clone(), src.parse().expect("tokens"));
        let out = dev("fn sq(x: f32) -> f32 { x * x }")
            .expect("expands")
            .to_string();
        assert!(out.contains("mod sq") && out.contains("DeviceFn"), "{out}");
        let refused = |src: &str, needle: &str| match dev(src) {
            Ok(_) => panic!("accepted: {src}"),
            Err(e) => assert!(e.to_string().contains(needle), "{src}: {e}"),
        };
        refused("fn f(x: &[f32]) -> f32 { x[0] }", "takes scalars");
        refused("fn f(x: f32) { }", "returns a value");
        refused(
            "fn f(x: f32) -> f32 { x + global_x() as f32 }",
            "needs a thread",
        );
        refused("fn f(x: f32) -> f32 { barrier(); x }", "needs a thread");
        refused("fn f(x: f32) -> f32 { return; }", "returns a f32");
        refused("fn f(x: f32) -> u32 { x }", "expected u32, found f32");
        let e = expand(
            "fast".parse().expect("tokens"),
            "fn f(x: &mut [f32]) {}".parse().expect("tokens"),
        )
        .expect_err("unknown argument");
        assert!(e.to_string().contains("`device`"), "{e}");
    }

    #[test]
    fn a_call_is_typed_from_its_context_and_consistent() {
        let k = lower::lower_as(
            &syn::parse_str("fn k(x: &mut [f32], n: &[u32]) { let v: u32 = count(n[0], 2); x[0] = scale(x[0], 2.0) + scale(x[1], 3.0); }")
                .expect("parses"),
            false,
            false,
        )
        .expect("lowers");
        let calls: Vec<(&str, &[ir::Ty], ir::Ty)> = k
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.args.as_slice(), c.ret))
            .collect();
        assert_eq!(
            calls,
            [
                ("count", &[ir::Ty::U32, ir::Ty::U32][..], ir::Ty::U32),
                ("scale", &[ir::Ty::F32, ir::Ty::F32][..], ir::Ty::F32),
            ]
        );
        let e = lower::lower_as(
            &syn::parse_str(
                "fn k(x: &mut [f32], n: &[u32]) { x[0] = f(x[0]); x[1] = f(n[0]) as f32; }",
            )
            .expect("parses"),
            false,
            false,
        )
        .expect_err("two signatures");
        assert!(
            e.to_string().contains("other types than at its first call"),
            "{e}"
        );
    }

    #[test]
    fn a_body_that_does_not_fit_its_bound_names_the_instantiation() {
        let e = expand_src("fn k<T: Numeric>(x: &mut [T]) { x[0] = x[0].sqrt(); }")
            .expect_err("sqrt of an integer");
        let msg = e.to_string();
        assert!(msg.contains("is for f32 and f64"), "{msg}");
        assert!(msg.contains("instantiation `T = i32`"), "{msg}");
        let e = expand_src("fn k<T: Clone>(x: &mut [T]) {}").expect_err("bound");
        assert!(e.to_string().contains("bounded by `Float`"), "{e}");
        let e = expand_src("fn k<T: Float, U: Float>(x: &mut [T], y: &[U]) {}").expect_err("two");
        assert!(e.to_string().contains("one type parameter"), "{e}");
    }
}
