//! Unit tests of the model session.
