//! Fuzzes the event parser: never panics; the fast path and the general
//! decoder agree on every input; a parsed event always has safe ids
//! and round-trips; a poison reason is always short.
#![no_main]

use hotcount::model::batch::MembershipKey;
use hotcount::event::{
    check_id, parse, parse_general, to_json, MAX_EVENT_ID_BYTES, MAX_ID_BYTES,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let result = parse(data);
    assert_eq!(result, parse_general(data), "fast path and general decoder disagree");
    match result {
        Ok(event) => {
            assert!(check_id(event.post_id(), MAX_ID_BYTES).is_ok());
            assert!(check_id(event.user_id(), MAX_ID_BYTES).is_ok());
            assert!(check_id(event.event_id(), MAX_EVENT_ID_BYTES).is_ok());
            let doc_id = hotcount::store::firestore::layout::membership_doc_id(&MembershipKey::of(&event));
            assert!(check_id(&doc_id, 1500).is_ok(), "unsafe doc id {doc_id:?}");
            assert_eq!(parse(to_json(&event).as_bytes()).as_ref(), Ok(&event));
        }
        Err(poison) => {
            let reason = poison.to_string();
            assert!(
                !reason.is_empty() && reason.len() <= 512,
                "reason {} bytes",
                reason.len()
            );
        }
    }
});
