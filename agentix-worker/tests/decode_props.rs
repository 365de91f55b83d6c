//! Property tests for what a peer hands the runtime: argument bytes for a
//! typed function (whole or cut into pieces, as large arguments arrive),
//! and the parts of a large payload. Whatever arrives, the outcome is a
//! value or a clear error of the right kind, never a panic; pieces decode
//! exactly as the whole would, and parts are joined exactly or refused.

use agentix_wire::errors::ErrorKind;
use agentix_wire::part::{join, split, PartTable, PART_BYTES};
use agentix_worker::invoke::decode_args;
use bytes::Bytes;
use proptest::prelude::*;

/// `bytes` cut in two at `at` (or at its end), as a payload's pieces.
fn pieces(bytes: &[u8], at: usize) -> Vec<Bytes> {
    let (head, tail) = bytes.split_at(at.min(bytes.len()));
    vec![Bytes::copy_from_slice(head), Bytes::copy_from_slice(tail)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_argument_bytes_decode_or_fail_cleanly(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        cut in 0usize..256,
    ) {
        let whole = decode_args::<(String, u64)>("app::f", &["name", "n"], &[Bytes::from(bytes.clone())]);
        match &whole {
            Ok(_) => {}
            Err(e) => prop_assert!(
                matches!(e.kind, ErrorKind::BadArguments | ErrorKind::TypeMismatch),
                "{e}"
            ),
        }
        let in_pieces = decode_args::<(String, u64)>("app::f", &["name", "n"], &pieces(&bytes, cut));
        prop_assert_eq!(in_pieces.map_err(|e| e.kind), whole.map_err(|e| e.kind));
    }

    #[test]
    fn well_typed_arguments_decode_by_position_and_by_name(
        name in ".{0,40}",
        n in any::<u64>(),
        cut in 0usize..64,
    ) {
        let positional = agentix_wire::cbor::to_vec(&(name.clone(), n)).unwrap();
        let got: (String, u64) = decode_args("app::f", &["name", "n"], &pieces(&positional, cut)).unwrap();
        prop_assert_eq!(&got, &(name.clone(), n));
        let mut named = std::collections::BTreeMap::new();
        named.insert("n", ciborium::Value::Integer(n.into()));
        named.insert("name", ciborium::Value::Text(name.clone()));
        let named = agentix_wire::cbor::to_vec(&named).unwrap();
        let got: (String, u64) = decode_args("app::f", &["name", "n"], &pieces(&named, cut)).unwrap();
        prop_assert_eq!(got, (name, n));
    }
}

proptest! {
    // Payloads of megabytes: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn parts_in_any_grouping_join_exactly(len in 0usize..(3 * PART_BYTES), seed in any::<u8>()) {
        let payload: Bytes = (0..len).map(|i| (i as u8) ^ seed).collect::<Vec<_>>().into();
        let mut pieces = split(payload.clone());
        let last = pieces.pop().unwrap();
        let mut table = PartTable::new(4 * PART_BYTES);
        for piece in pieces {
            table.push(7, len as u64, piece).unwrap();
        }
        prop_assert_eq!(join(table.finish(7, last).unwrap()), payload);
        prop_assert_eq!(table.held(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parts_that_do_not_add_up_are_refused(
        sizes in proptest::collection::vec(0usize..64, 1..8),
        total in 0u64..600,
        last in 0usize..64,
    ) {
        let mut table = PartTable::new(256);
        let mut pushed = 0usize;
        let mut refused = false;
        for size in sizes {
            match table.push(1, total, Bytes::from(vec![0u8; size])) {
                Ok(()) => pushed += size,
                Err(_) => refused = true,
            }
            prop_assert!(table.held() <= 256);
        }
        let finished = table.finish(1, Bytes::from(vec![0u8; last]));
        if !refused && pushed > 0 && pushed + last == total as usize {
            prop_assert_eq!(finished.unwrap().iter().map(Bytes::len).sum::<usize>(), total as usize);
        } else if refused || pushed > 0 {
            prop_assert!(finished.is_err());
        }
        prop_assert_eq!(table.held(), 0);
    }
}
