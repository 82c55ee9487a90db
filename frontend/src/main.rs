//! Entry point of the playground: only mounts the root component.

#[cfg(target_arch = "wasm32")]
mod client;
#[cfg(target_arch = "wasm32")]
mod components;
#[cfg(target_arch = "wasm32")]
mod state;

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(components::app::App);
}

/// The playground only runs in a browser; natively only the library's tests matter.
#[cfg(not(target_arch = "wasm32"))]
fn main() {}
