//! bub Discord channel (work in progress).
