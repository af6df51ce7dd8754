//! `parser`: sections and keywords → [`super::Config`].
