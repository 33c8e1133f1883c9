//! [`LaunchEnv::from_vars`]: each launcher's variables, the fallbacks, the precedence and
//! the errors.

use std::path::PathBuf;

use gpukit_core::{Error, Result};

use crate::launch::env::tasks_on_node;
use crate::launch::{LaunchEnv, LaunchSource, MAX_RUN_ID};

/// Parses `NAME=value` words (`NAME=` for an empty value).
fn parse(vars: &str) -> Result<LaunchEnv> {
    let vars: Vec<(&str, &str)> = vars
        .split_whitespace()
        .map(|w| w.split_once('=').unwrap())
        .collect();
    LaunchEnv::from_vars(|name| {
        let found = vars.iter().rev().find(|(n, _)| *n == name);
        found.map(|(_, v)| v.to_string())
    })
}

/// The `arg` and message of a `from_env` error.
fn env_err(vars: &str) -> (&'static str, String) {
    match parse(vars) {
        Err(Error::InvalidArgument { op, arg, message }) => {
            assert_eq!(op, "LaunchEnv::from_env");
            (arg, message)
        }
        other => panic!("{vars}: expected InvalidArgument, got {other:?}"),
    }
}

const TORCHRUN: &str = "RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 \
    MASTER_ADDR=node0 MASTER_PORT=29500 TORCHELASTIC_RUN_ID=job7 \
    TORCHELASTIC_RESTART_COUNT=2";

#[test]
fn torchrun_variables() {
    let env = parse(TORCHRUN).unwrap();
    let want = LaunchEnv {
        rank: 5,
        world_size: 8,
        local_rank: 1,
        local_world_size: 4,
        master: Some(("node0".into(), 29500)),
        id_file: None,
        rendezvous_port: Some(29501),
        run_id: Some("TORCHELASTIC_RUN_ID=job7,TORCHELASTIC_RESTART_COUNT=2".into()),
        source: LaunchSource::Torchrun,
    };
    assert_eq!(env, want);
    let more = " GPUKIT_RENDEZVOUS_PORT=40000 GPUKIT_ID_FILE=/shared/id GPUKIT_RUN_ID=mine";
    let env = parse(&format!("{TORCHRUN}{more}")).unwrap();
    assert_eq!(env.rendezvous_port, Some(40000));
    assert_eq!(env.id_file, Some(PathBuf::from("/shared/id")));
    assert_eq!(env.run_id.as_deref(), Some("mine"));
}

#[test]
fn missing_local_values_fall_back() {
    let local = |vars: &str| {
        let env = parse(&format!("{vars} MASTER_ADDR=h MASTER_PORT=1000")).unwrap();
        (env.local_rank, env.local_world_size)
    };
    // A local world size without a local rank: the block distribution.
    assert_eq!(local("RANK=5 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4"), (1, 4));
    // Neither: one node.
    assert_eq!(local("RANK=5 WORLD_SIZE=8"), (5, 8));
    // A local rank alone is checked against the world size.
    assert_eq!(local("RANK=5 WORLD_SIZE=8 LOCAL_RANK=5"), (5, 8));
    let (arg, message) = env_err("RANK=5 WORLD_SIZE=8 LOCAL_RANK=8 GPUKIT_ID_FILE=/x");
    assert_eq!(arg, "LOCAL_RANK");
    assert!(
        message.contains("LOCAL_RANK=8 is not below WORLD_SIZE=8"),
        "{message}"
    );
}

#[test]
fn slurm_variables() {
    let base = "SLURM_PROCID=6 SLURM_NTASKS=8 SLURM_LOCALID=2 SLURM_JOB_ID=1234 \
                SLURM_STEP_ID=0 MASTER_ADDR=n1 MASTER_PORT=29500";
    let env = parse(&format!("{base} SLURM_NTASKS_PER_NODE=4")).unwrap();
    assert_eq!(env.source, LaunchSource::Slurm);
    let numbers = (
        env.rank,
        env.world_size,
        env.local_rank,
        env.local_world_size,
    );
    assert_eq!(numbers, (6, 8, 2, 4));
    assert_eq!(env.master, Some(("n1".into(), 29500)));
    assert_eq!(
        env.run_id.as_deref(),
        Some("SLURM_JOB_ID=1234,SLURM_STEP_ID=0")
    );
    let local_world = |more: &str| parse(&format!("{base} {more}")).unwrap().local_world_size;
    // SLURM_NTASKS_PER_NODE wins over SLURM_TASKS_PER_NODE.
    assert_eq!(
        local_world("SLURM_NTASKS_PER_NODE=4 SLURM_TASKS_PER_NODE=8"),
        4
    );
    // The `4(x2)` form, and this node's own entry of an uneven list.
    assert_eq!(local_world("SLURM_TASKS_PER_NODE=4(x2)"), 4);
    let uneven = "SLURM_TASKS_PER_NODE=3(x2),2 SLURM_NODEID=2 SLURM_LOCALID=1";
    assert_eq!(local_world(uneven), 2);
    // No local variables: the block distribution on one node.
    let env = parse("SLURM_PROCID=1 SLURM_NTASKS=2 GPUKIT_ID_FILE=/x").unwrap();
    assert_eq!((env.local_rank, env.local_world_size), (1, 2));
    assert_eq!((env.master, env.run_id), (None, None));
}

#[test]
fn tasks_per_node_forms() {
    let cases = [
        ("4(x2)", 0, 4),
        ("4(x2)", 1, 4),
        ("3(x2),2", 2, 2),
        ("2,1", 1, 1),
    ];
    for (list, node, tasks) in cases {
        assert_eq!(
            tasks_on_node(list, node).unwrap(),
            tasks,
            "{list} node {node}"
        );
    }
    // A node past the list (a step on fewer nodes than the job): the first entry.
    assert_eq!(tasks_on_node("4(x2)", 5).unwrap(), 4);
    for bad in ["4(y2)", "4(x2", "four", "4(x)", ",", "4,,2", "4(x2),z"] {
        assert!(tasks_on_node(bad, 0).is_err(), "{bad}");
    }
}

#[test]
fn open_mpi_variables() {
    let env = parse(
        "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 \
         OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE=prterun-h-1@1 GPUKIT_ID_FILE=/id",
    )
    .unwrap();
    assert_eq!(env.source, LaunchSource::OpenMpi);
    let numbers = (
        env.rank,
        env.world_size,
        env.local_rank,
        env.local_world_size,
    );
    assert_eq!(numbers, (3, 4, 1, 2));
    assert_eq!((env.master, env.rendezvous_port), (None, None));
    assert_eq!(env.id_file, Some(PathBuf::from("/id")));
    assert_eq!(env.run_id.as_deref(), Some("PMIX_NAMESPACE=prterun-h-1@1"));
}

#[test]
fn single_without_a_launcher() {
    let env = parse("").unwrap();
    let want = LaunchEnv {
        rank: 0,
        world_size: 1,
        local_rank: 0,
        local_world_size: 1,
        master: None,
        id_file: None,
        rendezvous_port: None,
        run_id: None,
        source: LaunchSource::Single,
    };
    assert_eq!(env, want);
    assert_eq!(parse("WORLD_SIZE=1").unwrap(), want);
    // Empty values count as unset.
    assert_eq!(
        parse("RANK= SLURM_PROCID= MASTER_ADDR= GPUKIT_ID_FILE=").unwrap(),
        want
    );
    let (arg, message) = env_err("WORLD_SIZE=4");
    assert_eq!(arg, "RANK");
    assert!(message.contains("WORLD_SIZE=4"), "{message}");
}

#[test]
fn precedence_torchrun_then_slurm_then_open_mpi() {
    let slurm = "SLURM_PROCID=1 SLURM_NTASKS=2 GPUKIT_ID_FILE=/x";
    let ompi = "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3";
    let source = |vars: String| {
        let env = parse(&vars).unwrap();
        (env.source, env.rank)
    };
    let all = format!("{TORCHRUN} {slurm} {ompi}");
    assert_eq!(source(all), (LaunchSource::Torchrun, 5));
    assert_eq!(source(format!("{slurm} {ompi}")), (LaunchSource::Slurm, 1));
    let ompi_only = format!("{ompi} GPUKIT_ID_FILE=/x");
    assert_eq!(source(ompi_only), (LaunchSource::OpenMpi, 2));
}

#[test]
fn every_bad_variable_is_named_with_its_value() {
    // (variables, the variable blamed, text the message must hold); `+` is
    // GPUKIT_ID_FILE=/x, so that the world's transport is not what fails.
    let cases = [
        ("RANK=abc WORLD_SIZE=2 +", "RANK", "RANK=\"abc\""),
        ("RANK=-1 WORLD_SIZE=2 +", "RANK", "\"-1\""),
        (
            "RANK=0 WORLD_SIZE=2.0 +",
            "WORLD_SIZE",
            "WORLD_SIZE=\"2.0\"",
        ),
        (
            "RANK=4 WORLD_SIZE=4 +",
            "RANK",
            "RANK=4 is not below WORLD_SIZE=4",
        ),
        ("RANK=0 WORLD_SIZE=0 +", "WORLD_SIZE", "WORLD_SIZE=0"),
        (
            "RANK=0 +",
            "WORLD_SIZE",
            "RANK=\"0\" is set but WORLD_SIZE is not",
        ),
        ("RANK=0 WORLD_SIZE=2 LOCAL_RANK=x +", "LOCAL_RANK", "\"x\""),
        (
            "RANK=0 WORLD_SIZE=8 LOCAL_RANK=4 LOCAL_WORLD_SIZE=4 +",
            "LOCAL_RANK",
            "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4",
        ),
        (
            "RANK=0 WORLD_SIZE=8 LOCAL_WORLD_SIZE=0 +",
            "LOCAL_WORLD_SIZE",
            "=0",
        ),
        (
            "RANK=0 WORLD_SIZE=8 LOCAL_WORLD_SIZE=9 +",
            "LOCAL_WORLD_SIZE",
            "=9",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=70000",
            "MASTER_PORT",
            "\"70000\"",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=0",
            "MASTER_PORT",
            "\"0\"",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=http",
            "MASTER_PORT",
            "\"http\"",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=65535",
            "MASTER_PORT",
            "=65535",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h",
            "MASTER_PORT",
            "MASTER_ADDR=\"h\"",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_PORT=1000",
            "MASTER_ADDR",
            "MASTER_PORT=\"1000\"",
        ),
        (
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1 GPUKIT_RENDEZVOUS_PORT=x",
            "GPUKIT_RENDEZVOUS_PORT",
            "\"x\"",
        ),
        ("RANK=0 WORLD_SIZE=2", "MASTER_ADDR", "WORLD_SIZE=2"),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=3",
            "MASTER_ADDR",
            "SLURM_NTASKS=3",
        ),
        ("SLURM_PROCID=x SLURM_NTASKS=2 +", "SLURM_PROCID", "\"x\""),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=two +",
            "SLURM_NTASKS",
            "\"two\"",
        ),
        ("SLURM_PROCID=0 +", "SLURM_NTASKS", "SLURM_PROCID=\"0\""),
        (
            "SLURM_PROCID=2 SLURM_NTASKS=2 +",
            "SLURM_PROCID",
            "SLURM_PROCID=2",
        ),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=8 SLURM_LOCALID=4 SLURM_NTASKS_PER_NODE=4 +",
            "SLURM_LOCALID",
            "SLURM_LOCALID=4 is not below SLURM_NTASKS_PER_NODE=4",
        ),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=8 SLURM_LOCALID=4 SLURM_TASKS_PER_NODE=4(x2) +",
            "SLURM_LOCALID",
            "SLURM_TASKS_PER_NODE=4",
        ),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=8 SLURM_TASKS_PER_NODE=4(y2) +",
            "SLURM_TASKS_PER_NODE",
            "\"4(y2)\"",
        ),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=8 SLURM_NTASKS_PER_NODE=x +",
            "SLURM_NTASKS_PER_NODE",
            "\"x\"",
        ),
        (
            "SLURM_PROCID=0 SLURM_NTASKS=8 SLURM_TASKS_PER_NODE=4(x2) SLURM_NODEID=n +",
            "SLURM_NODEID",
            "\"n\"",
        ),
        (
            "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=-4 +",
            "OMPI_COMM_WORLD_SIZE",
            "\"-4\"",
        ),
        (
            "OMPI_COMM_WORLD_RANK=0 +",
            "OMPI_COMM_WORLD_SIZE",
            "RANK=\"0\" is set",
        ),
        (
            "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=2 \
             OMPI_COMM_WORLD_LOCAL_SIZE=2 +",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE=2",
        ),
        (
            "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_SIZE=y +",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "\"y\"",
        ),
        (
            "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4",
            "MASTER_ADDR",
            "OMPI_COMM_WORLD_SIZE=4",
        ),
    ];
    for (vars, want_arg, want_text) in cases {
        let (arg, message) = env_err(&vars.replace('+', "GPUKIT_ID_FILE=/x"));
        assert_eq!(arg, want_arg, "{vars}: {message}");
        assert!(
            message.contains(want_text),
            "{vars}: {message:?} lacks {want_text:?}"
        );
    }
    let long = format!("GPUKIT_RUN_ID={}", "r".repeat(MAX_RUN_ID + 1));
    assert_eq!(env_err(&long).0, "GPUKIT_RUN_ID");
    // The next port is not needed when the rendezvous port is given.
    let vars = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=65535 GPUKIT_RENDEZVOUS_PORT=5000";
    assert_eq!(parse(vars).unwrap().rendezvous_port, Some(5000));
}
