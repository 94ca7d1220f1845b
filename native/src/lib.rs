//! Native fast paths for ticdc-sink's codecs, and for reading staged rows back.
//!
//! Each decoder handles the common, well-formed case and returns `None` for anything else: the
//! pure-Python codec then decodes the same message and is the one that accepts it or raises a
//! `DecodeError` naming what is wrong. So a native decoder may refuse more than Python does, but
//! whatever it accepts decodes to exactly the events the Python codec returns (tested for parity).

mod craft;
mod csv;
mod go_string;
mod json;
mod model;
mod msgpack;
mod open_protocol;
mod simple;
mod staging;
mod unpack;

use pyo3::prelude::*;

/// What Python calls of this module (its classes, functions and their arguments): equal to
/// `API_VERSION` in core/native.py, which declines a module of another. Bump both on any change.
const API_VERSION: u32 = 3;

#[pymodule]
fn ticdc_sink_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<model::Model>()?;
    module.add_class::<open_protocol::OpenDecoder>()?;
    module.add_class::<craft::CraftDecoder>()?;
    module.add_class::<simple::SimpleDecoder>()?;
    module.add_class::<unpack::RowUnpacker>()?;
    module.add_class::<model::PackedMessage>()?;
    module.add_function(wrap_pyfunction!(staging::stage_frames, module)?)?;
    module.add_function(wrap_pyfunction!(csv::csv_rows, module)?)?;
    module.add("API_VERSION", API_VERSION)?;
    module.add("STAGING_LAYOUT_VERSION", staging::LAYOUT_VERSION)?;
    Ok(())
}
