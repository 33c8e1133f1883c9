//! Fuzz target `launcher_env`: arbitrary launcher environments through
//! `LaunchEnv::from_vars` (the testable core of `LaunchEnv::from_env`).
//!
//! The input decodes into a map of variables: mostly the ones the launcher reads (torchrun's,
//! Slurm's, Open MPI's, `MASTER_ADDR`/`MASTER_PORT`, gpukit's own and the run-id sources),
//! sometimes others, with values from a small grammar (small and edge numbers, padded,
//! signed or overflowing ones, ports, Slurm task lists like `4(x2),3`, long and multi-byte
//! strings, empty and blank values) or arbitrary text.
//!
//! Properties: nothing panics; an error is `Error::InvalidArgument` of
//! `LaunchEnv::from_env` whose `arg` is one of the variables the launcher reads and whose
//! message names it; a result is consistent (`rank < world_size`, `local_rank <
//! local_world_size <= world_size`, a world of several processes has a way to meet) and
//! agrees with the variables: the launcher is the first whose rank variable is set, the
//! numbers are the variables' (the local rank `rank % local_world_size` when unset), the
//! master, rendezvous port, id file and run id (at most 1024 bytes) are as the module docs
//! say. Setting an unrelated variable, or a read variable that was unset to the empty or a
//! blank string, changes nothing.
//!
//! Device-set specs (`DeviceSet`, what `GPU_DEVICE` and `gpu.toml`'s `devices` hold) are
//! text, and fuzzed with device specs by the `device_spec` target.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpukit::launch::{LaunchEnv, LaunchSource};
use gpukit::Error;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Every variable `LaunchEnv::from_vars` reads.
const READ: [&str; 26] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GPUKIT_ID_FILE",
    "GPUKIT_RENDEZVOUS_PORT",
    "GPUKIT_RUN_ID",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_RESTART_COUNT",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
];

/// Variables it does not read.
const OTHERS: [&str; 4] = ["GPU_DEVICE", "CUDA_VISIBLE_DEVICES", "rank", "RANK "];

/// Longest run id (`launch::MAX_RUN_ID`).
const MAX_RUN_ID: usize = 1024;

const EDGES: [&str; 18] = [
    "0",
    "1",
    "2",
    "65535",
    "65536",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "-1",
    "+1",
    "1e3",
    "0x10",
    " 7 ",
    "\t3\n",
    "",
    " ",
    "٣",
    "none",
];

fn value(u: &mut Unstructured<'_>) -> ArbResult<String> {
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => u.int_in_range(0..=9u32)?.to_string(),
        4 => u.choose(&EDGES)?.to_string(),
        5 => {
            let pad = *u.choose(&["", " ", "\t", "  \n"])?;
            format!("{pad}{}{pad}", u.int_in_range(0..=70000u32)?)
        }
        6 => {
            // A Slurm task list: `4(x2),3`, sometimes broken.
            let n = u.int_in_range(1..=4)?;
            let mut fields = Vec::new();
            for _ in 0..n {
                let count = u.int_in_range(0..=5u32)?;
                fields.push(match u.int_in_range(0..=5u8)? {
                    0..=2 => count.to_string(),
                    3 => format!("{count}(x{})", u.int_in_range(0..=4u32)?),
                    4 => format!("{count}(x{})", u.choose(&EDGES)?),
                    _ => u
                        .choose(&["(x2)", "4(2)", "4(x2", "x", "", " 4 (x2)", "4(x2) "])?
                        .to_string(),
                });
            }
            fields.join(",")
        }
        7 => {
            // Around the run id's limit, in one- and two-byte characters.
            let c = *u.choose(&["a", "é", "\u{1F600}"])?;
            let bytes = u.int_in_range(MAX_RUN_ID - 40..=MAX_RUN_ID + 40)?;
            c.repeat(bytes / c.len())
        }
        _ => u.arbitrary::<String>()?,
    })
}

fn decode(u: &mut Unstructured<'_>) -> ArbResult<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    let n = u.int_in_range(0..=12)?;
    for _ in 0..n {
        let name = if u.ratio(15, 16)? {
            *u.choose(&READ)?
        } else {
            *u.choose(&OTHERS)?
        };
        vars.insert(name.to_string(), value(u)?);
    }
    Ok(vars)
}

fn from_map(vars: &BTreeMap<String, String>) -> gpukit::Result<LaunchEnv> {
    LaunchEnv::from_vars(|name| vars.get(name).cloned())
}

/// A set variable's value (empty and blank ones count as unset).
fn get<'a>(vars: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    vars.get(name)
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

fn num(vars: &BTreeMap<String, String>, name: &str) -> Option<usize> {
    get(vars, name).and_then(|v| v.trim().parse().ok())
}

/// Checks a result against the variables.
fn check_ok(vars: &BTreeMap<String, String>, env: &LaunchEnv) {
    let show = || format!("vars: {vars:#?}\nenv: {env:#?}");
    assert!(env.world_size >= 1, "{}", show());
    assert!(env.rank < env.world_size, "{}", show());
    assert!(env.local_rank < env.local_world_size, "{}", show());
    assert!(env.local_world_size <= env.world_size, "{}", show());
    let (source, rank, world, local_rank, local_world) = if get(vars, "RANK").is_some() {
        (
            LaunchSource::Torchrun,
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            Some("LOCAL_WORLD_SIZE"),
        )
    } else if get(vars, "SLURM_PROCID").is_some() {
        let local = get(vars, "SLURM_NTASKS_PER_NODE").map(|_| "SLURM_NTASKS_PER_NODE");
        (
            LaunchSource::Slurm,
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            local,
        )
    } else if get(vars, "OMPI_COMM_WORLD_RANK").is_some() {
        (
            LaunchSource::OpenMpi,
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
        )
    } else {
        assert_eq!(env.source, LaunchSource::Single, "{}", show());
        assert_eq!((env.rank, env.world_size), (0, 1), "{}", show());
        assert!(
            matches!(num(vars, "WORLD_SIZE"), None | Some(1)),
            "{}",
            show()
        );
        (LaunchSource::Single, "", "", "", None)
    };
    assert_eq!(env.source, source, "{}", show());
    if source != LaunchSource::Single {
        assert_eq!(Some(env.rank), num(vars, rank), "{}", show());
        assert_eq!(Some(env.world_size), num(vars, world), "{}", show());
        match local_world.and_then(|v| get(vars, v).map(|_| v)) {
            Some(v) => assert_eq!(Some(env.local_world_size), num(vars, v), "{}", show()),
            None if source == LaunchSource::Slurm
                && get(vars, "SLURM_TASKS_PER_NODE").is_some() =>
            {
                // One of the list's counts.
                let list = get(vars, "SLURM_TASKS_PER_NODE").unwrap_or_default();
                let counts: Vec<usize> = list
                    .trim()
                    .split(',')
                    .filter_map(|f| f.split('(').next()?.trim().parse().ok())
                    .collect();
                assert!(counts.contains(&env.local_world_size), "{}", show());
            }
            None => assert_eq!(env.local_world_size, env.world_size, "{}", show()),
        }
        match get(vars, local_rank) {
            Some(_) => assert_eq!(Some(env.local_rank), num(vars, local_rank), "{}", show()),
            None => assert_eq!(
                env.local_rank,
                env.rank % env.local_world_size,
                "{}",
                show()
            ),
        }
    }
    let port = |name: &str| -> Option<u16> {
        get(vars, name)
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|&p| p != 0)
    };
    match (get(vars, "MASTER_ADDR"), get(vars, "MASTER_PORT")) {
        (Some(addr), Some(_)) => {
            let p = port("MASTER_PORT");
            assert!(p.is_some(), "{}", show());
            assert_eq!(
                env.master,
                Some((addr.trim().to_string(), p.unwrap_or(0))),
                "{}",
                show()
            );
        }
        (None, None) => assert_eq!(env.master, None, "{}", show()),
        _ => panic!("half of MASTER_ADDR/MASTER_PORT accepted\n{}", show()),
    }
    let rendezvous = match get(vars, "GPUKIT_RENDEZVOUS_PORT") {
        Some(_) => port("GPUKIT_RENDEZVOUS_PORT"),
        None => env.master.as_ref().and_then(|(_, p)| p.checked_add(1)),
    };
    assert_eq!(env.rendezvous_port, rendezvous, "{}", show());
    assert_eq!(
        env.id_file,
        get(vars, "GPUKIT_ID_FILE").map(PathBuf::from),
        "{}",
        show()
    );
    if env.world_size > 1 {
        assert!(env.master.is_some() || env.id_file.is_some(), "{}", show());
    }
    match get(vars, "GPUKIT_RUN_ID") {
        Some(id) => assert_eq!(env.run_id.as_deref(), Some(id), "{}", show()),
        None => {
            if let Some(id) = &env.run_id {
                assert!(id.len() <= MAX_RUN_ID, "{}", show());
                assert!(!id.is_empty(), "{}", show());
            }
        }
    }
}

fn check_err(vars: &BTreeMap<String, String>, e: &Error) {
    match e {
        Error::InvalidArgument { op, arg, message } => {
            assert_eq!(*op, "LaunchEnv::from_env", "{e}");
            assert!(
                READ.contains(arg),
                "{e}: `{arg}` is not a variable it reads\nvars: {vars:#?}"
            );
            assert!(
                message.contains(arg),
                "{e}: the message does not name `{arg}`"
            );
        }
        other => panic!("expected InvalidArgument, got {other:?}\nvars: {vars:#?}"),
    }
    assert!(!e.to_string().is_empty());
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(vars) = decode(&mut u) else {
        return;
    };
    let first = from_map(&vars);
    match &first {
        Ok(env) => check_ok(&vars, env),
        Err(e) => check_err(&vars, e),
    }

    // An unrelated variable changes nothing.
    let mut more = vars.clone();
    more.insert("GPUKIT_FUZZ_UNRELATED".into(), "1".into());
    assert_eq!(
        from_map(&more),
        first,
        "an unrelated variable changed the result"
    );

    // Nor does setting an unset one to an empty or blank value.
    if let Ok(i) = u.int_in_range(0..=READ.len() - 1) {
        let name = READ[i];
        if !vars.contains_key(name) {
            let blank = if u.arbitrary().unwrap_or(false) {
                ""
            } else {
                " \t"
            };
            let mut more = vars.clone();
            more.insert(name.into(), blank.into());
            assert_eq!(from_map(&more), first, "{name}={blank:?} is not unset");
        }
    }
});
