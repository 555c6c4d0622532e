pub mod apply_body;
