//! nrt-layout
