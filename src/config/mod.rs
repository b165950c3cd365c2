//! Configuration: `RawConfig` (serde, `deny_unknown_fields`) → [`Config`], with every problem
//! reported at once, each naming the file, field and source id (SPEC §2, STYLE "Configuration").

mod live;
mod load;
mod types;

pub use live::*;
pub use load::*;
pub use types::*;
