//! The `#[remote]` attribute.
//!
//! It turns `pub async fn run(input: String) -> Output { .. }` into:
//! - a constant `run: agentix::Remote<(String,), Output>`, the typed handle
//!   the host passes to `sandbox.remote(run, args)`;
//! - a hidden `__agentix_remote_run` holding the original body;
//! - a registry entry named `module_path!()::run` that the worker looks up.
//!
//! A function returning `Result<T, E>` (any type path ending in `Result`)
//! yields `T` on the host; `Err(e)` becomes a `Raised` remote error.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::{parse_macro_input, FnArg, Ident, ItemFn, Pat, ReturnType, Type};

/// Makes an `async fn` callable from the host with `sandbox.remote(f, args)`.
#[proc_macro_attribute]
pub fn remote(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(Span::call_site(), "#[remote] takes no arguments")
            .to_compile_error()
            .into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(func) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(func: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[remote] functions must be `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "#[remote] functions cannot be generic: the worker must know the concrete types",
        ));
    }
    let mut names: Vec<Ident> = Vec::new();
    let mut types: Vec<Type> = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(
                    r,
                    "#[remote] functions are free functions, not methods",
                ))
            }
            FnArg::Typed(arg) => match &*arg.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                    names.push(p.ident.clone());
                    types.push((*arg.ty).clone());
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "#[remote] parameters must be plain names (they name the arguments on the wire)",
                    ))
                }
            },
        }
    }

    let vis = &func.vis;
    let name = &sig.ident;
    let name_str = name.to_string();
    let impl_name = format_ident!("__agentix_remote_{}", name);
    let param_strs: Vec<String> = names
        .iter()
        .map(|n| n.to_string().trim_start_matches("r#").to_owned())
        .collect();
    let (ret_ty, fallible) = match &sig.output {
        ReturnType::Default => (quote!(()), false),
        ReturnType::Type(_, ty) => (quote!(#ty), is_result(ty)),
    };
    let out_ty = if fallible {
        quote!(<#ret_ty as ::agentix::__private::Fallible>::Ok)
    } else {
        ret_ty.clone()
    };
    let runner = if fallible {
        quote!(::agentix::__private::invoke::fallible)
    } else {
        quote!(::agentix::__private::invoke::plain)
    };

    let (doc_attrs, other_attrs): (Vec<_>, Vec<_>) =
        func.attrs.iter().partition(|a| a.path().is_ident("doc"));
    let cfg_attrs: Vec<_> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .collect();

    let mut body_fn = func.clone();
    body_fn.sig.ident = impl_name.clone();
    body_fn.attrs = other_attrs.into_iter().cloned().collect();

    Ok(quote! {
        #(#doc_attrs)*
        #(#cfg_attrs)*
        #[allow(non_upper_case_globals)]
        #vis const #name: ::agentix::Remote<(#(#types,)*), #out_ty> =
            ::agentix::Remote::new(::core::concat!(::core::module_path!(), "::", #name_str));

        #[doc(hidden)]
        #[allow(non_snake_case)]
        #body_fn

        #(#cfg_attrs)*
        ::agentix::__private::inventory::submit! {
            ::agentix::__private::RemoteFn {
                name: ::core::concat!(::core::module_path!(), "::", #name_str),
                params: &[#(#param_strs),*],
                invoke: |args| ::std::boxed::Box::pin(#runner::<(#(#types,)*), _, _>(
                    ::core::concat!(::core::module_path!(), "::", #name_str),
                    &[#(#param_strs),*],
                    args,
                    |(#(#names,)*)| #impl_name(#(#names),*),
                )),
            }
        }
    })
}

/// Whether `ty` is a path whose last segment is `Result` (std, io, anyhow, ...).
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
        Type::Group(g) => is_result(&g.elem),
        Type::Paren(p) => is_result(&p.elem),
        _ => false,
    }
}
