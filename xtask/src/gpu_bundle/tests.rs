//! Tests of `gpu-bundle`: reading cargo's messages, naming binaries, the folder safety rule,
//! the manifest; `run.sh` itself is tested on fake bundles in [`run_sh`].

mod run_sh;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A fresh folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "xtask-gpu-bundle-{label}-{}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn artifact(name: &str, test: bool, executable: &str) -> Artifact {
    Artifact {
        name: name.to_owned(),
        kinds: vec!["test".to_owned()],
        test,
        executable: PathBuf::from(executable),
    }
}

#[test]
fn reads_test_artifacts_from_cargo_json() {
    // `target.test` is true for a lib too; only `profile.test` says it is a test harness.
    let lib = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["lib"],"crate_types":["lib"],"name":"gpukit_core","src_path":"/w/src/lib.rs","edition":"2021","doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/w/target/release/deps/libgpukit_core-1.rlib"],"executable":null,"fresh":true}"#;
    assert_eq!(parse_artifact(lib).unwrap(), None);

    let unit = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["lib"],"crate_types":["lib"],"name":"gpukit_core","src_path":"/w/src/lib.rs","edition":"2021","doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":true},"features":[],"filenames":["/w/target/release/deps/gpukit_core-0123abcd"],"executable":"/w/target/release/deps/gpukit_core-0123abcd","fresh":false}"#;
    assert_eq!(
        parse_artifact(unit).unwrap(),
        Some(Artifact {
            name: "gpukit_core".to_owned(),
            kinds: vec!["lib".to_owned()],
            test: true,
            executable: PathBuf::from("/w/target/release/deps/gpukit_core-0123abcd"),
        })
    );

    let example = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["example"],"crate_types":["bin"],"name":"transfer_bench","src_path":"/w/crates/gpukit-bench/examples/transfer_bench.rs","edition":"2021","doctest":false,"test":false},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/w/target/release/examples/transfer_bench"],"executable":"/w/target/release/examples/transfer_bench","fresh":true}"#;
    let example = parse_artifact(example).unwrap().unwrap();
    assert!(!example.test);
    assert_eq!(example.kinds, ["example"]);

    // Escaped characters in a path come back as written.
    let odd = r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"t"},"profile":{"test":true},"executable":"/tmp/a \"b\"\\c/t-1"}"#;
    assert_eq!(
        parse_artifact(odd).unwrap().unwrap().executable,
        PathBuf::from("/tmp/a \"b\"\\c/t-1")
    );

    let other = r#"{"reason":"build-finished","success":true}"#;
    assert_eq!(parse_artifact(other).unwrap(), None);
    // A build script's run has no `executable`; a diagnostic has no `target` fields we read.
    let script = r#"{"reason":"build-script-executed","package_id":"x","linked_libs":[],"out_dir":"/w/out"}"#;
    assert_eq!(parse_artifact(script).unwrap(), None);
    let diagnostic = r#"{"reason":"compiler-message","target":{"kind":["lib"],"name":"x"},"message":{"rendered":"warning"}}"#;
    assert_eq!(parse_artifact(diagnostic).unwrap(), None);
    assert!(parse_artifact("{not json").is_err());
    assert_eq!(
        parse_artifact(r#"{"executable":"/t"}"#).unwrap(),
        None,
        "no reason"
    );
    assert_eq!(parse_artifact("[1, 2]").unwrap(), None, "not an object");
}

#[test]
fn every_program_and_the_comparator_are_where_the_bundle_takes_them_from() {
    let root = util::workspace_root();
    for (package, names) in [
        (BENCH_PACKAGE, BENCH_PROGRAMS),
        (TOOL_PACKAGE, TOOL_PROGRAMS),
    ] {
        let manifest = fs::read_to_string(root.join("crates").join(package).join("Cargo.toml"))
            .unwrap_or_else(|err| panic!("{package}: {err}"));
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "{package}"
        );
        for name in names {
            let source = root
                .join("crates")
                .join(package)
                .join("examples")
                .join(format!("{name}.rs"));
            assert!(source.is_file(), "{}", source.display());
        }
    }
    let comparator = root.join(TORCH_COMPARATOR_SOURCE);
    assert!(comparator.is_file());
    // Every module the comparator imports from its folder is carried with it.
    let text = std::fs::read_to_string(&comparator).unwrap();
    let folder = comparator.parent().unwrap();
    for module in TORCH_COMPARATOR_MODULES {
        assert!(folder.join(module).is_file(), "{module}");
        let name = module.trim_end_matches(".py");
        assert!(text.contains(&format!("from {name} import")), "{module}");
    }
    // run.sh runs the doctor by this name.
    assert!(TOOL_PROGRAMS.contains(&"cuda_doctor"));
    // The Python module's tests, the example one runs, and their runner.
    for script in crate::python::BUNDLED_SCRIPTS
        .iter()
        .chain([&crate::python::LIBTEST_RUNNER])
    {
        assert!(root.join(script).is_file(), "{script}");
    }
    let tests = root.join("crates/gpukit-python/tests");
    for entry in fs::read_dir(&tests).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with("test_") && name.ends_with(".py") {
            assert!(
                crate::python::BUNDLED_SCRIPTS
                    .iter()
                    .any(|s| s.ends_with(&format!("/{name}"))),
                "{name} is not carried by the bundle"
            );
        }
    }
}

#[test]
fn refuses_bad_arguments_before_building() {
    let root = Path::new("/nonexistent-xtask-root");
    for bad in [&["a", "b"][..], &["--fast"][..], &["--dir=x"][..]] {
        let args: Vec<String> = bad.iter().map(|arg| arg.to_string()).collect();
        let err = run(root, &args).unwrap_err();
        assert_eq!(err.code, 2, "{bad:?}: {}", err.message);
    }
    assert!(run(root, &["-h".to_owned()]).unwrap_err().is_help());
}

#[test]
fn names_binaries_by_target_and_disambiguates_collisions() {
    let named = name_test_binaries(&[
        artifact("behaviour", true, "/t/deps/behaviour-aaaa"),
        artifact("gpu", true, "/t/deps/gpu-1111"),
        artifact("gpu", true, "/t/deps/gpu-2222"),
        artifact("gpu", true, "/t/deps/gpu-2222"), // reported twice: one binary
        artifact("transfer_bench", false, "/t/examples/transfer_bench"),
    ]);
    assert_eq!(
        named,
        vec![
            (
                "behaviour".to_owned(),
                PathBuf::from("/t/deps/behaviour-aaaa")
            ),
            ("gpu-1111".to_owned(), PathBuf::from("/t/deps/gpu-1111")),
            ("gpu-2222".to_owned(), PathBuf::from("/t/deps/gpu-2222")),
        ]
    );
}

#[test]
fn formats_sizes() {
    assert_eq!(human_size(512), "512 B");
    assert_eq!(human_size(1536), "1.5 KiB");
    assert_eq!(human_size(MAX_BUNDLE_BYTES), "64.0 MiB");
}

#[test]
fn manifest_lists_files_and_total() {
    let text = manifest_text(
        &Provenance {
            commit: "abc123".to_owned(),
            date: "2024-01-01 00:00:00 UTC".to_owned(),
            rustc: "rustc 1.85.0".to_owned(),
        },
        &[("tests/a".to_owned(), 1000), ("run.sh".to_owned(), 24)],
    );
    assert!(text.contains("\ncommit: abc123\n"), "{text}");
    assert!(text.contains("        1000  tests/a\n"), "{text}");
    assert!(text.contains("        1024  total"), "{text}");
}

#[test]
fn empties_only_an_earlier_bundle() {
    let tmp = TempDir::new("clear");
    let fresh = tmp.path().join("fresh");
    clear_dir(&fresh).unwrap();
    assert!(fresh.is_dir());
    clear_dir(&fresh).unwrap(); // empty: fine

    let foreign = tmp.path().join("foreign");
    fs::create_dir_all(foreign.join("sub")).unwrap();
    fs::write(foreign.join("notes.txt"), "keep me").unwrap();
    let err = clear_dir(&foreign).unwrap_err();
    assert!(err.message.contains("MANIFEST.txt"), "{}", err.message);
    assert!(foreign.join("notes.txt").is_file());

    let old = tmp.path().join("old");
    fs::create_dir_all(old.join("tests")).unwrap();
    fs::write(old.join("tests/x"), "x").unwrap();
    fs::write(old.join(MANIFEST), "m").unwrap();
    clear_dir(&old).unwrap();
    assert_eq!(fs::read_dir(&old).unwrap().count(), 0);

    let file = tmp.path().join("file");
    fs::write(&file, "f").unwrap();
    assert!(clear_dir(&file).is_err());

    let root = tmp.path().join("ws");
    fs::create_dir_all(root.join("xtask")).unwrap();
    assert!(refuse_unsafe_dir(&root, &root).is_err());
    assert!(refuse_unsafe_dir(&root, tmp.path()).is_err());
    assert!(refuse_unsafe_dir(&root, &root.join("bundle")).is_ok());
}
