//! The inbound event parser on arbitrary bytes: `switchboard_domain::fuzzing::event`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = switchboard_domain::fuzzing::event(data) {
        panic!("{broken}");
    }
});
