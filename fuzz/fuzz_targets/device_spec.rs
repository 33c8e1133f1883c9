//! Fuzz target `device_spec`: arbitrary text through `DeviceSpec` and `DeviceSet` parsing
//! (one device, and the device sets of `GPU_DEVICE`, `gpu.toml`'s `devices` and
//! `DeviceGroup`).
//!
//! Properties, for each: parsing never panics; `str::parse` and `parse_from` agree; an error
//! is always `Error::InvalidDeviceSpec` naming the input and origin it was given, and its
//! message formats; a parsed value's `Display` parses back to an equal one; parsing ignores
//! ASCII case and surrounding white space. A text that is a device is the set of that one
//! device; a set's list is what its ordinals and ranges (`a`, `a..b`, `a..=b`) name, in
//! order, none twice, at most `MAX_SET_DEVICES` (an independent reading of the text).
#![no_main]

use gpukit_core::{DeviceSet, DeviceSpec, Error, SpecBackend, MAX_SET_DEVICES};
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
    if let Err(e) = &parsed {
        let _ = e.to_string();
    }
    check_set(&input, &origin, parsed.ok());
});

/// The ordinals a set's text names, read independently of the parser (in `u128`, so that no
/// range end overflows): `None` where it is not a list of ordinals and ranges, or names a
/// device twice or more than `MAX_SET_DEVICES`.
fn expected_list(ordinals: &str) -> Option<Vec<usize>> {
    let number = |t: &str| -> Option<u128> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse::<u128>().ok().filter(|&n| n <= usize::MAX as u128)
    };
    let mut out: Vec<usize> = Vec::new();
    for part in ordinals.split(',') {
        let (lo, end) = match part.split_once("..") {
            None => {
                let n = number(part)?;
                (n, n + 1)
            }
            Some((lo, hi)) => {
                let lo = number(lo)?;
                let end = match hi.strip_prefix('=') {
                    Some(h) => number(h)? + 1,
                    None => number(hi)?,
                };
                (lo, end)
            }
        };
        if end <= lo || end - lo > (MAX_SET_DEVICES - out.len()) as u128 {
            return None;
        }
        for n in lo..end {
            let n = n as usize;
            if out.contains(&n) {
                return None;
            }
            out.push(n);
        }
    }
    Some(out)
}

fn check_set(input: &str, origin: &str, spec: Option<DeviceSpec>) {
    let parsed = input.parse::<DeviceSet>();
    let from = DeviceSet::parse_from(input, origin);
    match (&parsed, &from) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "set: parse and parse_from disagree on {input:?}"),
        (Err(_), Err(_)) => {}
        _ => panic!("set: parse and parse_from disagree on {input:?}: {parsed:?} vs {from:?}"),
    }
    if let Some(spec) = spec {
        assert_eq!(
            from.as_ref().ok(),
            Some(&DeviceSet::from(spec)),
            "{input:?} is the device {spec:?} but not the set of it"
        );
    }
    // The independent reading of a list.
    let lower = input.trim().to_ascii_lowercase();
    let listed = lower.split_once(':').and_then(|(name, ordinals)| {
        let backend = match name {
            "cpu" => SpecBackend::Cpu,
            "cuda" => SpecBackend::Cuda,
            "vulkan" => SpecBackend::Vulkan,
            _ => return None,
        };
        (ordinals != "*").then(|| (backend, expected_list(ordinals)))
    });
    match from {
        Ok(set) => {
            if let Some((backend, want)) = listed {
                let want = want.map(|v| {
                    DeviceSet::List(v.into_iter().map(|n| backend.spec(Some(n))).collect())
                });
                assert_eq!(Some(&set), want.as_ref(), "{input:?}");
            }
            if let DeviceSet::List(v) = &set {
                assert!(
                    !v.is_empty() && v.len() <= MAX_SET_DEVICES,
                    "{input:?}: {set:?}"
                );
            }
            let shown = set.to_string();
            let again = shown.parse::<DeviceSet>();
            assert!(
                matches!(&again, Ok(s) if *s == set),
                "{input:?} parsed to {set:?}, shown as {shown:?}, which parses to {again:?}"
            );
            let padded = format!(" \t{}\n ", input.to_ascii_uppercase());
            let upper = padded.parse::<DeviceSet>();
            assert!(
                matches!(&upper, Ok(s) if *s == set),
                "{input:?} parsed to {set:?} but {padded:?} to {upper:?}"
            );
        }
        Err(Error::InvalidDeviceSpec {
            input: ref got_input,
            origin: ref got_origin,
            ref reason,
        }) => {
            assert_eq!(got_input, input);
            assert_eq!(got_origin, origin);
            assert!(!reason.is_empty());
            if let Some((_, Some(want))) = listed {
                panic!("{input:?} names {want:?}, but is refused: {reason}");
            }
        }
        Err(other) => panic!("set {input:?}: expected InvalidDeviceSpec, got {other:?}"),
    }
}
