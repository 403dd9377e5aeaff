//! The `bodies` fuzz target's corpus (`fuzz/corpus/bodies/`) and the crashes kept from it
//! (`fuzz/regressions/bodies/`), replayed through the target's own check
//! (`switchboard_api::fuzzing::body`) on every test run, so that what the fuzzer once found stays
//! found without the nightly toolchain.

use std::path::{Path, PathBuf};

use switchboard_api::fuzzing::{self, Body};

/// Every input kept for `target`; an empty or missing corpus fails, for a replay of nothing
/// would pass.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let corpus = files(&fuzz.join("corpus").join(target));
    assert!(!corpus.is_empty(), "fuzz/corpus/{target} is missing or empty");
    corpus.into_iter().chain(files(&fuzz.join("regressions").join(target))).collect()
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
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
