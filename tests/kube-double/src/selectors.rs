//! Query strings and the selectors in them, as the API server reads them:
//! `labelSelector` (`key=value`, `key!=value`, `key`, comma-separated)
//! and `fieldSelector` (`metadata.name=..`, `involvedObject.name=..`).

use std::collections::BTreeMap;

/// The query of a request's URI, decoded.
pub fn query(uri: &hyper::Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

/// `text` with its `%XX` escapes and `+` decoded.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `labels` satisfy the label selector `selector` (empty: all).
pub fn labels_match(selector: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    selector
        .split(',')
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .all(|term| {
            if let Some((key, value)) = term.split_once("!=") {
                labels.get(key.trim()).map(String::as_str) != Some(value.trim())
            } else if let Some((key, value)) = term.split_once('=') {
                let value = value.trim_start_matches('=');
                labels.get(key.trim()).map(String::as_str) == Some(value.trim())
            } else if let Some(key) = term.strip_prefix('!') {
                !labels.contains_key(key)
            } else {
                labels.contains_key(term)
            }
        })
}

/// Whether the fields `fields` (path → value) satisfy the field selector
/// `selector` (empty: all).
pub fn fields_match(selector: &str, fields: &[(&str, &str)]) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .all(|term| {
            let (key, value, equal) = match term.split_once("!=") {
                Some((key, value)) => (key, value, false),
                None => match term.split_once('=') {
                    Some((key, value)) => (key, value.trim_start_matches('='), true),
                    None => return false,
                },
            };
            let actual = fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            (actual == Some(value)) == equal
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_as_the_api_server_reads_them() {
        let uri: hyper::Uri =
            "/api/v1/pods?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dagentix&watch=true"
                .parse()
                .unwrap();
        let q = query(&uri);
        assert_eq!(q["labelSelector"], "app.kubernetes.io/managed-by=agentix");
        let labels = BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_owned(),
            "agentix".to_owned(),
        )]);
        assert!(labels_match(&q["labelSelector"], Some(&labels)));
        assert!(!labels_match("a=b", Some(&labels)));
        assert!(labels_match("!a", Some(&labels)));
        assert!(fields_match("metadata.name=x", &[("metadata.name", "x")]));
        assert!(!fields_match("metadata.name=y", &[("metadata.name", "x")]));
    }
}
