//! Every JSON body the API reads, the first byte picking which (`A` an agent, `B` a trigger, …:
//! `switchboard_api::fuzzing::Body::picked_by`): `switchboard_api::fuzzing::body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = switchboard_api::fuzzing::body(data) {
        panic!("{broken}");
    }
});
