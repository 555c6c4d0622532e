//! manager
