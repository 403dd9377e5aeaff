//! The trigger condition parser, and evaluation of what it accepts, on arbitrary bytes:
//! `switchboard_domain::fuzzing::condition`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = switchboard_domain::fuzzing::condition(data) {
        panic!("{broken}");
    }
});
