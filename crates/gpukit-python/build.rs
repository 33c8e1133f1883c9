//! PyO3's configuration cfgs (`Py_3_11`, `Py_LIMITED_API`) for this crate: the module's
//! buffer protocol exists where the stable ABI it targets has the buffer slots (3.11).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
