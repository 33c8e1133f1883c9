//! The digits perceptron trained data-parallel (`gpukit_examples::parallel`, the model of
//! the `data_parallel` example) on two and three logical CPU devices, as CI runs it: it must
//! reach 95% held-out accuracy like one device does, every replica must end with the same
//! parameters, and one step over the group must equal one step on a single device within
//! the sum-order tolerance.

use gpukit::{Context, DeviceGroup, DeviceSpec};
use gpukit_examples::digits::{self, Config, FEATURES, MINIBATCH};
use gpukit_examples::parallel;

fn group(set: &str) -> DeviceGroup {
    match set.parse().and_then(DeviceGroup::new) {
        Ok(g) => g,
        Err(e) => panic!("{set}: the CPU devices must open: {e}"),
    }
}

#[test]
fn two_cpu_devices_learn_the_digits_like_one() {
    let cfg = Config::default();
    let g = group("cpu:0..2");
    let dp = match parallel::train(&g, &cfg) {
        Ok(o) => o,
        Err(e) => panic!("data-parallel training failed: {e}"),
    };
    println!("losses {:?}", dp.epoch_loss);
    println!("held-out accuracy per epoch {:?}", dp.epoch_test_accuracy);
    assert_eq!(dp.devices, 2);
    assert_eq!(dp.epoch_test_accuracy.len(), cfg.epochs);
    assert!(
        dp.test_accuracy() >= 0.95,
        "held-out accuracy {:.4} is below 95%",
        dp.test_accuracy()
    );
    assert!(
        dp.replicas_agree(),
        "the replicas differ: {:?}",
        dp.checksums
    );
    let (first, last) = (dp.epoch_loss[0], dp.epoch_loss[cfg.epochs - 1]);
    assert!(
        last < 0.5 * first,
        "the loss fell only from {first} to {last}"
    );
    for r in &dp.reports {
        assert_eq!(r.rows, cfg.epochs * 1437, "every device sees every shard");
    }
    // The same seed and global batch on one device: the same accuracy within 1.5 points
    // (5 of 360 samples; the sums' order differs, and 460 steps carry the difference).
    let cpu = Context::new(DeviceSpec::Cpu(None)).expect("cpu");
    let one = digits::train(&cpu, &cfg).expect("single-device training");
    let diff = (dp.test_accuracy() - one.test_accuracy()).abs();
    assert!(
        diff <= 0.015,
        "2 devices {:.4} vs 1 device {:.4}",
        dp.test_accuracy(),
        one.test_accuracy()
    );
}

/// One step over 2, 3 and 4 devices equals one step on one device within the sum-order
/// tolerance, for a full minibatch and for a short one that does not split evenly.
#[test]
fn one_step_over_the_group_equals_one_step_on_one_device() {
    let all = digits::load_csv(&digits::data_path()).expect("data");
    let cfg = Config::default();
    let cpu = Context::new(DeviceSpec::Cpu(None)).expect("cpu");
    for set in ["cpu:0..2", "cpu:0..3", "cpu:0..4"] {
        let g = group(set);
        for m in [MINIBATCH, 29] {
            let (x, labels) = (&all.x[..m * FEATURES], &all.labels[..m]);
            let (worst, agree) = parallel::one_step_difference(&g, &cpu, &cfg, x, labels)
                .unwrap_or_else(|e| panic!("{set}, {m} rows: {e}"));
            println!("{set}, {m} rows: largest relative difference {worst:.3e}");
            assert!(agree, "{set}, {m} rows: the replicas differ after one step");
            // f32 sums of at most 64 terms in another order: a few ulps of the largest
            // magnitude (2^-23 = 1.2e-7), nowhere near a missing or doubled gradient.
            assert!(worst < 1e-6, "{set}, {m} rows: {worst:e}");
        }
    }
}
