//! The `bodies` fuzz target's corpus (`fuzz/corpus/bodies/`) and the crashes kept from it
//! (`fuzz/regressions/bodies/`), replayed through the target's own check
//! (`switchboard_api::fuzzing::body`) on every test run, so that what the fuzzer once found stays
//! found without the nightly toolchain.

use std::path::{Path, PathBuf};

use switchboard_api::fuzzing::{self, Body};

/// Every input kept for `target` (an empty or missing corpus fails).
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    switchboard_domain::fuzzing::kept_inputs(&fuzz, target).unwrap()
}

#[test]
fn every_kept_body_input_is_read_without_panic_and_records_round_trip() {
    let inputs = inputs("bodies");
    for (path, bytes) in &inputs {
        match std::panic::catch_unwind(|| fuzzing::body(bytes)) {
            Ok(Ok(())) => {}
            Ok(Err(broken)) => panic!("{}: {broken}", path.display()),
            Err(_) => panic!("{}: the check panicked (message above)", path.display()),
        }
    }
    // The corpus keeps every kind of body the API reads.
    for body in Body::ALL {
        assert!(
            inputs.iter().any(|(_, bytes)| bytes.first().map(|b| Body::picked_by(*b)) == Some(body)),
            "the corpus holds no {body:?} body"
        );
    }
}
