//! Placeholder: written by the outbound helper.
