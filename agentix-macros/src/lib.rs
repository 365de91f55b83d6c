//! The `#[remote]` attribute.
//!
//! It turns `pub async fn run(input: String) -> Output { .. }` into:
//! - a constant `run: agentix::Remote<(String,), Output>`, the typed handle
//!   the host passes to `sandbox.remote(run, args)`;
//! - a hidden `__agentix_remote_run` holding the original body;
//! - a registry entry named `module_path!()::run` that the worker looks up.
//!
//! A function returning `Result<T, E>` (any type path ending in `Result`)
//! yields `T` on the host; `Err(e)` becomes a `Raised` remote error, which
//! also carries `e`'s fields when `E: Serialize`.
//!
//! A function returning `impl Stream<Item = T>` (it may be `async` or not)
//! becomes a `RemoteStream<(args,), T>` the host consumes item by item with
//! `sandbox.stream(f, args)`; `Result` items unwrap the same way, and an
//! `Err` item ends the stream.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::{
    parse_macro_input, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type,
    TypeParamBound,
};

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
    let stream_item = match &sig.output {
        ReturnType::Type(_, ty) => stream_item(ty),
        ReturnType::Default => None,
    };
    if sig.asyncness.is_none() && stream_item.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[remote] functions must be `async fn` (or return `impl Stream<Item = T>`)",
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
    let (ret_ty, fallible) = match (&stream_item, &sig.output) {
        (Some(item), _) => (quote!(#item), is_result(item)),
        (None, ReturnType::Default) => (quote!(()), false),
        (None, ReturnType::Type(_, ty)) => (quote!(#ty), is_result(ty)),
    };
    let out_ty = if fallible {
        quote!(<#ret_ty as ::agentix::__private::Fallible>::Ok)
    } else {
        ret_ty.clone()
    };
    // The runner and how many of its type parameters (after the argument
    // tuple) are left to inference.
    let (handle, invoke, runner, inferred) = match (stream_item.is_some(), fallible) {
        (false, false) => (quote!(Remote), quote!(Unary), quote!(plain), 2),
        (false, true) => (quote!(Remote), quote!(Unary), quote!(fallible), 3),
        (true, false) => (
            quote!(RemoteStream),
            quote!(Stream),
            quote!(stream_plain),
            2,
        ),
        (true, true) => (
            quote!(RemoteStream),
            quote!(Stream),
            quote!(stream_fallible),
            4,
        ),
    };
    let inferred = vec![quote!(_); inferred];
    let call_body = if sig.asyncness.is_some() {
        quote!(#impl_name(#(#names),*))
    } else {
        quote!(::core::future::ready(#impl_name(#(#names),*)))
    };
    // `Err(e)` becomes its wire form here, where `E` is concrete, so an error
    // type that is `Serialize` keeps its fields (see `agentix_wire::raised`).
    let raise = quote!(|e| {
        #[allow(unused_imports)]
        use ::agentix::__private::{RaisePlain as _, RaiseWithData as _};
        (&&::agentix::__private::Raised(&e)).into_remote_error()
    });
    let call_body = match (stream_item.is_some(), fallible) {
        (_, false) => call_body,
        (false, true) => quote!(async move {
            ::core::result::Result::map_err(#call_body.await, #raise)
        }),
        (true, true) => quote!(async move {
            ::agentix::StreamExt::map(#call_body.await, |item| {
                ::core::result::Result::map_err(item, #raise)
            })
        }),
    };
    let wrap = if stream_item.is_some() {
        quote!()
    } else {
        quote!(::std::boxed::Box::pin)
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
        #vis const #name: ::agentix::#handle<(#(#types,)*), #out_ty> =
            ::agentix::#handle::new(::core::concat!(::core::module_path!(), "::", #name_str));

        #[doc(hidden)]
        #[allow(non_snake_case)]
        #body_fn

        #(#cfg_attrs)*
        ::agentix::__private::inventory::submit! {
            ::agentix::__private::RemoteFn {
                name: ::core::concat!(::core::module_path!(), "::", #name_str),
                params: &[#(#param_strs),*],
                invoke: ::agentix::__private::Invoke::#invoke(|args| #wrap(
                    ::agentix::__private::invoke::#runner::<(#(#types,)*), #(#inferred),*>(
                        ::core::concat!(::core::module_path!(), "::", #name_str),
                        &[#(#param_strs),*],
                        args,
                        |(#(#names,)*)| #call_body,
                    )
                )),
            }
        }
    })
}

/// The `T` of a return type `impl Stream<Item = T> + ..` (any path ending in
/// `Stream`), or `None` for any other return type.
fn stream_item(ty: &Type) -> Option<Type> {
    let bounds = match ty {
        Type::ImplTrait(t) => &t.bounds,
        Type::Group(g) => return stream_item(&g.elem),
        Type::Paren(p) => return stream_item(&p.elem),
        _ => return None,
    };
    bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(t) = bound else {
            return None;
        };
        let last = t.path.segments.last()?;
        if last.ident != "Stream" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(a) if a.ident == "Item" => Some(a.ty.clone()),
            _ => None,
        })
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
