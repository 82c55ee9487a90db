//! Delayed Tensor Parallelism settings of a model (docs/dtp.md): the
//! file forms (a `dtp` block in config.json, `peregrine.dtp.*` GGUF keys, a CLI
//! spec string) normalised into one [`DtpConfig`], then bound to a run's lane count
//! and layer count as a [`DtpSchedule`] that says, layer by layer, how partial sums
//! combine. The CPU reference and the CUDA kernel both read the schedule, so the
//! rule lives here once.

use serde::{Deserialize, Serialize};

use crate::config::ModelConfig;
use crate::dtp::shard::ShardPlan;
use crate::error::{Error, Result};

/// GGUF metadata key of the delay (its presence makes the file a DTP model).
pub const GGUF_DELAY_KEY: &str = "peregrine.dtp.delay";
/// GGUF metadata key of the lane count (0 or absent: the tensor-parallel degree at run time).
pub const GGUF_LANES_KEY: &str = "peregrine.dtp.lanes";
/// GGUF metadata key of the early-layer mode (`present` or `none`; absent: `present`).
pub const GGUF_EARLY_KEY: &str = "peregrine.dtp.early_layers";
/// Key of the block inside a Hugging Face `config.json`.
pub const HF_BLOCK_KEY: &str = "dtp";

/// How the first `delay` layers combine their partial sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EarlyLayers {
    /// Immediate all-reduce, as in standard tensor parallelism: `r_i += Σ_j p_j[n]`.
    Present,
    /// Lane-local only, never exchanged: `r_i += sqrt(L) · p_i[n]`.
    None,
}

impl EarlyLayers {
    /// The name used in every file form (the CUDA runtime's description, the tests').
    #[cfg(any(feature = "cuda", feature = "lab"))]
    pub fn name(self) -> &'static str {
        match self {
            EarlyLayers::Present => "present",
            EarlyLayers::None => "none",
        }
    }
}

impl std::str::FromStr for EarlyLayers {
    type Err = Error;
    fn from_str(s: &str) -> Result<EarlyLayers> {
        match s {
            "present" => Ok(EarlyLayers::Present),
            "none" => Ok(EarlyLayers::None),
            other => Err(bad(format!("early_layers `{other}` is not one of present, none"))),
        }
    }
}

/// How many lanes the model runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// As many lanes as the run's tensor-parallel degree (`--tp N`).
    RunTime,
    /// The model was trained for exactly this many lanes; other degrees are refused.
    Fixed(usize),
}

/// A model's DTP description, normalised from any of its file forms (no `Option`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtpConfig {
    pub lanes: Lanes,
    /// `d`: layer `n`'s partials from the other lanes are added at layer `n + d`.
    pub delay: usize,
    pub early_layers: EarlyLayers,
}

/// The `dtp` block of `config.json`, mirrored as written (docs/dtp.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DtpBlock {
    /// Absent, null or 0: the tensor-parallel degree at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<usize>,
    pub delay: usize,
    /// Absent: `present`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_layers: Option<EarlyLayers>,
}

impl DtpBlock {
    /// The normalised config (range checks happen when it is bound: [`DtpSchedule::new`]).
    pub fn to_config(&self) -> DtpConfig {
        DtpConfig {
            lanes: match self.lanes {
                None | Some(0) => Lanes::RunTime,
                Some(n) => Lanes::Fixed(n),
            },
            delay: self.delay,
            early_layers: self.early_layers.unwrap_or(EarlyLayers::Present),
        }
    }
}

impl DtpConfig {
    /// The block written into `config.json` for this config.
    #[cfg(feature = "lab")]
    pub fn to_block(&self) -> DtpBlock {
        DtpBlock {
            lanes: match self.lanes {
                Lanes::RunTime => None,
                Lanes::Fixed(n) => Some(n),
            },
            delay: self.delay,
            early_layers: Some(self.early_layers),
        }
    }

    /// The `dtp` block of a parsed `config.json`, if it has one.
    pub fn from_hf_json(config_json: &serde_json::Value) -> Result<Option<DtpConfig>> {
        match config_json.get(HF_BLOCK_KEY) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(block) => {
                let block: DtpBlock = serde_json::from_value(block.clone())
                    .map_err(|e| bad(format!("invalid `{HF_BLOCK_KEY}` block in config.json: {e}")))?;
                Ok(Some(block.to_config()))
            }
        }
    }

    /// The `peregrine.dtp.*` keys of a GGUF file, if it has them; `get_u64` / `get_str`
    /// look a key up (kept abstract so the rule is tested without writing a file).
    pub fn from_gguf_keys(get_u64: impl Fn(&str) -> Option<u64>, get_str: impl Fn(&str) -> Option<String>) -> Result<Option<DtpConfig>> {
        let Some(delay) = get_u64(GGUF_DELAY_KEY) else {
            if get_u64(GGUF_LANES_KEY).is_some() || get_str(GGUF_EARLY_KEY).is_some() {
                return Err(bad(format!("GGUF has DTP keys but no {GGUF_DELAY_KEY}")));
            }
            return Ok(None);
        };
        let early_layers = match get_str(GGUF_EARLY_KEY) {
            Some(s) => s.parse()?,
            None => EarlyLayers::Present,
        };
        let lanes = get_u64(GGUF_LANES_KEY).unwrap_or(0);
        let to_usize = |v: u64, key: &str| usize::try_from(v).map_err(|_| bad(format!("{key} = {v} is out of range")));
        Ok(Some(
            DtpBlock {
                lanes: Some(to_usize(lanes, GGUF_LANES_KEY)?),
                delay: to_usize(delay, GGUF_DELAY_KEY)?,
                early_layers: Some(early_layers),
            }
            .to_config(),
        ))
    }
}

/// The CLI form: `delay=D[,early=present|none][,lanes=N]`, e.g. `--dtp delay=2,early=present`.
impl std::str::FromStr for DtpConfig {
    type Err = Error;
    fn from_str(spec: &str) -> Result<DtpConfig> {
        let mut block = DtpBlock { lanes: None, delay: usize::MAX, early_layers: None };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| bad(format!("`{part}` in `{spec}` is not key=value")))?;
            let number = || value.parse::<usize>().map_err(|_| bad(format!("{key} `{value}` is not a whole number")));
            match key {
                "delay" | "d" => block.delay = number()?,
                "lanes" => block.lanes = Some(number()?),
                "early" | "early_layers" => block.early_layers = Some(value.parse()?),
                other => return Err(bad(format!("unknown key `{other}` in `{spec}` (expected delay, early, lanes)"))),
            }
        }
        if block.delay == usize::MAX {
            return Err(bad(format!("`{spec}` gives no delay (e.g. delay=2,early=present)")));
        }
        Ok(block.to_config())
    }
}

/// How layer `n`'s partial sums `p_j[n]` (of one block: attention or MLP, the same rule
/// for both) enter lane `i`'s residual stream `r_i` (Kog's Laneformer, docs/dtp.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Combine {
    /// `r_i += Σ_j p_j[n]`: a blocking all-reduce (early layers with early communication).
    /// Every lane's partial is on every lane afterwards, so it is also there to be added
    /// again at layer `n + d`.
    AllReduce,
    /// `r_i += scale · p_i[n]`, `scale = sqrt(L)`: nothing added from the other lanes
    /// now; `send`: `p_i[n]` still goes to them, to be added at layer `n + d`.
    LaneLocal { scale: f32, send: bool },
    /// `r_i += p_i[n] + Σ_{j≠i} p_j[received]` with `received = n − d`; `send`: this
    /// layer's `p_i[n]` goes to every other lane. With delay 0, `received == n`: a
    /// blocking all-reduce.
    Delayed { received: usize, send: bool },
}

/// A [`DtpConfig`] bound to a run: lanes, layers and delay checked, the per-layer rule fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct DtpSchedule {
    pub lanes: usize,
    pub delay: usize,
    pub early_layers: EarlyLayers,
    /// Layers `n ≥ d` add the other lanes' partials (Laneformer's `use_comm`); without it
    /// every such layer is lane-local.
    pub comm: bool,
    pub num_layers: usize,
}

impl DtpSchedule {
    /// Binds `dtp` to `model` run on `degree` lanes (the tensor-parallel degree);
    /// every impossible combination is an error that names the fields.
    pub fn new(dtp: &DtpConfig, model: &ModelConfig, degree: usize) -> Result<DtpSchedule> {
        if let Lanes::Fixed(n) = dtp.lanes {
            if n != degree {
                return Err(bad(format!("{} was trained for {n} DTP lanes; run it with --tp {n}, not {degree}", model.name)));
            }
        }
        let (d, layers) = (dtp.delay, model.num_layers);
        if d == 0 && dtp.early_layers == EarlyLayers::None {
            return Err(bad(
                "delay 0 reduces every layer at once (standard tensor parallelism); early_layers `none` needs delay ≥ 1".into()
            ));
        }
        if d > layers {
            return Err(bad(format!("delay {d} exceeds the {layers} layers of {}", model.name)));
        }
        // Lanes shard the heads, FFN columns and vocabulary exactly as standard TP does.
        ShardPlan::new(model, degree)?;
        Ok(DtpSchedule { lanes: degree, delay: d, early_layers: dtp.early_layers, comm: true, num_layers: layers })
    }

    /// The schedule of a Laneformer model (`model.lanes`), on one lane per shard.
    pub fn of_laneformer(model: &ModelConfig) -> Result<DtpSchedule> {
        let l = &model.lanes;
        let early_layers = if l.early_comm || l.delay == 0 { EarlyLayers::Present } else { EarlyLayers::None };
        let config = DtpConfig { lanes: Lanes::Fixed(l.count), delay: l.delay, early_layers };
        Ok(DtpSchedule { comm: l.comm, ..DtpSchedule::new(&config, model, l.count)? })
    }

    /// Standard tensor parallelism on `lanes` lanes, written as a schedule (delay 0).
    #[cfg(feature = "lab")]
    pub fn standard(model: &ModelConfig, lanes: usize) -> Result<DtpSchedule> {
        DtpSchedule::new(&DtpConfig { lanes: Lanes::RunTime, delay: 0, early_layers: EarlyLayers::Present }, model, lanes)
    }

    /// How layer `n`'s partials combine (docs/dtp.md's rule, literally).
    pub fn combine(&self, n: usize) -> Combine {
        let (d, layers) = (self.delay, self.num_layers);
        // Layer n's partials are added by the other lanes at layer n + d, if there is one.
        let send = self.comm && n + d < layers;
        let lane_local = Combine::LaneLocal { scale: (self.lanes as f32).sqrt(), send };
        if n < d {
            return match self.early_layers {
                EarlyLayers::Present => Combine::AllReduce,
                EarlyLayers::None => lane_local,
            };
        }
        if !self.comm {
            return lane_local;
        }
        Combine::Delayed { received: n - d, send }
    }

    /// The schedule as NVRTC `-D` values (name, value), so the kernel never restates the
    /// rule's constants: lanes, delay, early-layer mode (1 = `none`) and its lane-local scale.
    /// Only cuda/layout reads them, which has no user in a build without `cuda` or `lab`.
    #[cfg_attr(not(any(feature = "cuda", feature = "lab")), allow(dead_code))]
    pub fn kernel_defines(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DTP_LANES", self.lanes.to_string()),
            ("DTP_DELAY", self.delay.to_string()),
            ("DTP_EARLY_NONE", u8::from(self.early_layers == EarlyLayers::None).to_string()),
            ("DTP_LANE_SCALE", format!("{:?}f", (self.lanes as f32).sqrt())),
        ]
    }

    /// Layers whose partials travel between lanes: those with a layer `d` later (every
    /// layer when delay is 0), none without communication.
    #[cfg(feature = "lab")]
    pub fn sent_layers(&self) -> std::ops::Range<usize> {
        if self.comm {
            0..self.num_layers - self.delay
        } else {
            0..0
        }
    }
}

fn bad(reason: String) -> Error {
    Error::InvalidRequest(format!("dtp: {reason}"))
}
