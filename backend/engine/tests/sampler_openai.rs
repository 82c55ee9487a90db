//! OpenAI's logit adjustments in the CPU sampler against an independent Python
//! implementation of OpenAI's formula (fixtures/sampler, scripts/fixtures/
//! make_sampler_fixtures.py): logit bias plus presence and frequency penalties over the
//! tokens generated so far (the prompt not counted); then what they do to sampling.

use peregrine_engine::sampling::{adjusted_logits, sample, SamplingParams};
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sampler/openai_penalties.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the sampler fixture")).expect("JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|t| t.as_f64().unwrap() as f32).collect()
}

#[test]
fn adjusted_logits_equal_openais_formula() {
    let f = fixture();
    let cases = f["cases"].as_array().unwrap();
    assert!(cases.len() >= 7);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let (prompt, generated) = (ids(&c["prompt"]), ids(&c["generated"]));
        let seen: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
        let params = SamplingParams {
            presence_penalty: c["presence"].as_f64().unwrap() as f32,
            frequency_penalty: c["frequency"].as_f64().unwrap() as f32,
            logit_bias: c["bias"].as_object().unwrap().iter().map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap() as f32)).collect(),
            ..SamplingParams::default()
        };
        params.validate().expect("valid");
        let logits = floats(&c["logits"]);
        let got = adjusted_logits(&logits, &params, &seen, generated.len() as u64);
        for (j, (g, e)) in got.iter().zip(floats(&c["expected"])).enumerate() {
            assert!((g - e).abs() <= 1e-5, "{name}: token {j}: {g} vs {e}");
        }
    }
}

#[test]
fn the_adjustments_steer_sampling() {
    let logits = [1.0, 3.0, 2.9, 0.0];
    let greedy = SamplingParams::default();
    assert_eq!(sample(&logits, &greedy, &[], 0, 0).id, 1);
    // A bias forces a token; a generated token's penalties hand the lead to the next.
    let forced = SamplingParams { logit_bias: vec![(3, 100.0)], ..SamplingParams::default() };
    assert_eq!(sample(&logits, &forced, &[], 0, 0).id, 3);
    let penalised = SamplingParams { presence_penalty: 0.2, ..SamplingParams::default() };
    assert_eq!(sample(&logits, &penalised, &[1], 1, 0).id, 2, "token 1 was generated");
    assert_eq!(sample(&logits, &penalised, &[1], 0, 0).id, 1, "token 1 was only in the prompt");
    // Seeded sampling with the adjustments is reproducible.
    let seeded =
        SamplingParams { temperature: 1.0, seed: 9, frequency_penalty: 0.5, logit_bias: vec![(0, 1.5)], ..SamplingParams::default() };
    let run = || (0..32).map(|s| sample(&logits, &seeded, &[2, 2, 1], s.min(3), 0).id).collect::<Vec<_>>();
    assert_eq!(run(), run());
    // Out-of-range values are refused.
    assert!(SamplingParams { presence_penalty: 2.5, ..SamplingParams::default() }.validate().is_err());
    assert!(SamplingParams { logit_bias: vec![(1, -101.0)], ..SamplingParams::default() }.validate().is_err());
    assert!(SamplingParams { frequency_penalty: f32::NAN, ..SamplingParams::default() }.validate().is_err());
}
