//! hotcount: exactly-once like counting for viral posts.
#![forbid(unsafe_code)]
