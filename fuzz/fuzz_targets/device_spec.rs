//! Fuzz target `device_spec`: arbitrary text through `DeviceSpec` parsing.
//!
//! Properties: parsing never panics; `str::parse` and `DeviceSpec::parse_from` agree; an
//! error is always `Error::InvalidDeviceSpec` naming the input and origin it was given, and
//! its message formats; a parsed spec's `Display` parses back to an equal spec; parsing
//! ignores ASCII case and surrounding white space.
#![no_main]

use gpukit_core::{DeviceSpec, Error};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the origin ends, so origins are fuzzed too.
    let (origin, input) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n).min(rest.len()) / 8),
        None => (&[][..], data),
    };
    let origin = String::from_utf8_lossy(origin);
    let input = String::from_utf8_lossy(input);

    let parsed = input.parse::<DeviceSpec>();
    let from = DeviceSpec::parse_from(&input, &origin);
    match (&parsed, &from) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parse and parse_from disagree on {input:?}"),
        (Err(_), Err(_)) => {}
        _ => panic!("parse and parse_from disagree on {input:?}: {parsed:?} vs {from:?}"),
    }
    match from {
        Ok(spec) => {
            let shown = spec.to_string();
            let again = shown.parse::<DeviceSpec>();
            assert!(
                matches!(again, Ok(s) if s == spec),
                "{input:?} parsed to {spec:?}, shown as {shown:?}, which parses to {again:?}"
            );
            let padded = format!(" \t{}\n ", input.to_ascii_uppercase());
            let upper = padded.parse::<DeviceSpec>();
            assert!(
                matches!(upper, Ok(s) if s == spec),
                "{input:?} parsed to {spec:?} but {padded:?} to {upper:?}"
            );
        }
        Err(Error::InvalidDeviceSpec {
            input: ref got_input,
            origin: ref got_origin,
            ref reason,
        }) => {
            assert_eq!(got_input, &*input);
            assert_eq!(got_origin, &*origin);
            assert!(!reason.is_empty());
        }
        Err(other) => panic!("{input:?}: expected InvalidDeviceSpec, got {other:?}"),
    }
    if let Err(e) = parsed {
        let _ = e.to_string();
    }
});
