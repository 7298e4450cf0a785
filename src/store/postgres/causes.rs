//! An error shown with its causes on one line: the driver's `Display`
//! says only "error connecting to server"; why is in its sources.
//!
//! Invariants: every cause is shown once, in order, joined by `: `; a
//! cause whose text already ends the message (an error that prints its
//! source itself) is not repeated. A leaf: it imports nothing of the store,
//! so the session and the error classes both use it.

/// `error` and each of its sources, joined by `: `.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = e.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_cause_is_shown_once_in_order() {
        let refused = Layer("connection refused", None);
        let io = Layer("io: connection refused", Some(Box::new(refused)));
        let top = Layer("error connecting to server", Some(Box::new(io)));
        assert_eq!(
            with_causes(&top),
            "error connecting to server: io: connection refused"
        );
    }
}
