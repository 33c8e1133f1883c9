//! The digits perceptron (`gpukit_examples::digits`, the model of the `training_pipeline`
//! example) trained on the CPU backend, as CI runs it: it must reach 95% held-out accuracy,
//! its training loss must fall, every epoch must read every shard once (the metadata the
//! loader sends reaches the sink), and two runs must agree bit for bit.

use gpukit::{Context, DeviceSpec, Pattern};
use gpukit_examples::digits::{self, Config};

fn cpu() -> Context {
    match Context::new(DeviceSpec::Cpu(None)) {
        Ok(ctx) => ctx,
        Err(e) => panic!("the CPU backend must open: {e}"),
    }
}

fn train(cfg: &Config) -> digits::Outcome {
    match digits::train(&cpu(), cfg) {
        Ok(o) => o,
        Err(e) => panic!("training failed: {e}"),
    }
}

#[test]
fn the_perceptron_learns_the_digits() {
    let cfg = Config::default();
    let a = train(&cfg);
    println!("losses {:?}", a.epoch_loss);
    println!("held-out accuracy per epoch {:?}", a.epoch_test_accuracy);
    println!("{}", a.report.summary());
    assert_eq!(a.epoch_loss.len(), cfg.epochs);
    assert_eq!(a.epoch_test_accuracy.len(), cfg.epochs);
    assert!(
        a.test_accuracy() >= 0.95,
        "held-out accuracy {:.4} is below 95%",
        a.test_accuracy()
    );
    let (first, last) = (a.epoch_loss[0], a.epoch_loss[cfg.epochs - 1]);
    assert!(
        last < 0.5 * first,
        "the loss fell only from {first} to {last}"
    );
    // Every epoch read each of the 12 shards once, the last one short.
    for files in &a.epoch_files {
        let mut sorted = files.clone();
        sorted.sort();
        let want: Vec<String> = (0..12).map(|k| format!("train-{k:02}.bin")).collect();
        assert_eq!(sorted, want);
    }
    assert_eq!(a.report.rows, cfg.epochs * 1437);
}

/// The CPU backend is deterministic: the same seed gives the same bits, also with another
/// pattern (the batches' order on the device does not depend on the overlap), and also
/// while the other test trains on another thread of this process (each run has its own
/// shard folder).
#[test]
fn two_runs_agree_bit_for_bit() {
    let cfg = Config::default();
    let a = train(&cfg);
    let b = train(&Config {
        pattern: Pattern::Sequential,
        ..cfg.clone()
    });
    assert_eq!(a.epoch_loss, b.epoch_loss);
    assert_eq!(a.epoch_train_accuracy, b.epoch_train_accuracy);
    assert_eq!(a.epoch_test_accuracy, b.epoch_test_accuracy);
    assert_eq!(a.epoch_files, b.epoch_files);
    assert_eq!(a.checksum, b.checksum);
}
