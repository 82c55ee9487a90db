//! The share API on both stores (a SQLite file, a real PostgreSQL server): create,
//! read, 404, expiry (404 at once, then removed by the background sweep), the
//! per-client rate (429 with Retry-After) and the cap (507); a database that goes
//! away mid-run (503, then served again once it is back), and start-up refusing a
//! store it cannot reach, naming the flag.

mod common;

use std::time::{Duration, Instant};

use common::postgres::Postgres;
use common::{dist_with_index, start, temp_dir};
use peregrine_api::playground::{Share, ShareCreated};
use peregrine_server::app::AppState;
use peregrine_server::share_policy::SharePolicy;
use peregrine_server::share_rate::RateLimiter;
use peregrine_server::share_store::{spawn_sweeper, ShareStore, StoreSpec};
use serde_json::{json, Value};

/// Rows in the store's table, expired ones included (what the sweep frees).
async fn rows(spec: &StoreSpec) -> i64 {
    match spec {
        StoreSpec::Sqlite(path) => {
            rusqlite::Connection::open(path).unwrap().query_row("SELECT count(*) FROM shares", [], |r| r.get(0)).unwrap()
        }
        StoreSpec::Postgres(config) => {
            let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            client.query_one("SELECT count(*) FROM shares", &[]).await.unwrap().get(0)
        }
    }
}

fn policy(rate: &str, max: u64, ttl: Option<Duration>) -> SharePolicy {
    SharePolicy { rate: RateLimiter::new(rate.parse().unwrap()), max, ttl }
}

async fn post(client: &reqwest::Client, url: &str, prompt: &str) -> reqwest::Response {
    client.post(format!("{url}/api/shares")).json(&json!({ "prompt": prompt, "mode": "complete" })).send().await.unwrap()
}

/// Every behaviour of the share API on one store; `fresh` gives an empty store each time.
async fn exercise<F, Fut>(label: &str, fresh: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = StoreSpec>,
{
    let client = reqwest::Client::new();

    // Create, read back, 404 for unknown ids; the rate: 3 per minute per client.
    let spec = fresh("api").await;
    let store = ShareStore::connect(&spec).await.unwrap();
    let server = start(AppState::new(dist_with_index()).with_shares(store).with_share_policy(policy("3/minute", 0, None))).await;
    let res = post(&client, &server.url(""), "def fib(n):").await;
    assert_eq!(res.status(), 201, "{label}");
    let created: ShareCreated = res.json().await.unwrap();
    let back: Share = client.get(server.url(&format!("/api/shares/{}", created.id))).send().await.unwrap().json().await.unwrap();
    assert_eq!((back.id.as_str(), back.share.prompt.as_str()), (created.id.as_str(), "def fib(n):"), "{label}");
    assert!(back.created_at > 1_600_000_000, "{label}");
    let res = client.get(server.url("/api/shares/AAAAAAAAAAAA")).send().await.unwrap();
    assert_eq!(res.status(), 404, "{label}");
    for n in 2..=3 {
        assert_eq!(post(&client, &server.url(""), &format!("share {n}")).await.status(), 201, "{label}: share {n} of 3");
    }
    let res = post(&client, &server.url(""), "one too many").await;
    assert_eq!(res.status(), 429, "{label}");
    let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "{label}: the next slot frees within 60/3 s, said {retry}");
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["code"], "share_rate_limit", "{label}: {e}");
    assert_eq!(e["retry_after_ms"], retry * 1000, "{label}: {e}");
    assert!(e["message"].as_str().unwrap().contains("3/minute"), "{label}: {e}");
    // Sizes and fields are checked first: a bad share is a 400, not a 429.
    let res = client.post(server.url("/api/shares")).json(&json!({ "prompt": " " })).send().await.unwrap();
    assert_eq!(res.status(), 400, "{label}");
    server.stop().await;

    // The cap counts live shares: at 3 stored, the next is a 507 that says why.
    let spec = fresh("cap").await;
    let store = ShareStore::connect(&spec).await.unwrap();
    let server = start(AppState::new(dist_with_index()).with_shares(store).with_share_policy(policy("0", 3, None))).await;
    for n in 1..=3 {
        assert_eq!(post(&client, &server.url(""), &format!("share {n}")).await.status(), 201, "{label}");
    }
    let res = post(&client, &server.url(""), "over the cap").await;
    assert_eq!(res.status(), 507, "{label}");
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["code"], "share_store_full", "{label}: {e}");
    assert!(e["message"].as_str().unwrap().contains("3 shares"), "{label}: {e}");
    assert_eq!(rows(&spec).await, 3, "{label}: nothing old was dropped to make room");
    server.stop().await;

    // Expiry: 404 the moment the lifetime ends (before any sweep), then the sweep
    // removes the row; an expired share no longer counts against the cap.
    let spec = fresh("ttl").await;
    let store = ShareStore::connect(&spec).await.unwrap();
    let ttl = Duration::from_millis(1500);
    let state = AppState::new(dist_with_index()).with_shares(store.clone()).with_share_policy(policy("0", 1, Some(ttl)));
    let server = start(state).await;
    let made = Instant::now();
    let created: ShareCreated = post(&client, &server.url(""), "short-lived").await.json().await.unwrap();
    let url = server.url(&format!("/api/shares/{}", created.id));
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200, "{label}");
    assert_eq!(post(&client, &server.url(""), "at the cap").await.status(), 507, "{label}");
    tokio::time::sleep(ttl.saturating_sub(made.elapsed()) + Duration::from_millis(50)).await;
    let res = client.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 404, "{label}: expired");
    assert_eq!(rows(&spec).await, 1, "{label}: still on disk until the sweep");
    let sweeper = spawn_sweeper(store, Duration::from_millis(100));
    let started = Instant::now();
    while rows(&spec).await > 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "{label}: the sweep did not remove the expired share");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sweeper.abort();
    assert_eq!(post(&client, &server.url(""), "room again").await.status(), 201, "{label}");
    server.stop().await;
}

#[tokio::test]
async fn the_share_api_on_sqlite() {
    let started = Instant::now();
    exercise("sqlite", |name| async move { StoreSpec::Sqlite(temp_dir(&format!("sqlite-{name}")).join("shares.sqlite3")) }).await;
    println!("sqlite: {:.2} s", started.elapsed().as_secs_f64());
}

#[tokio::test]
async fn the_share_api_on_postgres() {
    let started = Instant::now();
    let Some(pg) = Postgres::start().await else { return };
    println!("PostgreSQL up in {:.2} s", started.elapsed().as_secs_f64());
    let pg = &pg;
    exercise("postgres", |name| async move { pg.database(name).await.parse().unwrap() }).await;
    println!("postgres: {:.2} s in all", started.elapsed().as_secs_f64());
}

#[tokio::test]
async fn a_database_that_goes_away_is_503_and_served_again_when_back() {
    let Some(mut pg) = Postgres::start().await else { return };
    let spec: StoreSpec = pg.database("flaky").await.parse().unwrap();
    let store = ShareStore::connect(&spec).await.unwrap();
    let server = start(AppState::new(dist_with_index()).with_shares(store)).await;
    let client = reqwest::Client::new();
    let created: ShareCreated = post(&client, &server.url(""), "before").await.json().await.unwrap();
    let url = server.url(&format!("/api/shares/{}", created.id));

    pg.pause();
    for res in [post(&client, &server.url(""), "while down").await, client.get(&url).send().await.unwrap()] {
        assert_eq!(res.status(), 503);
        let e: Value = res.json().await.unwrap();
        assert_eq!(e["code"], "store_unavailable", "{e}");
        assert!(e["message"].as_str().unwrap().contains("127.0.0.1"), "the reason names the database: {e}");
    }
    pg.resume().await;
    // Both connections were lost: each is opened again on its next use.
    for _ in 0..4 {
        let res = client.get(&url).send().await.unwrap();
        assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    }
    assert_eq!(post(&client, &server.url(""), "after").await.status(), 201);
    server.stop().await;
}

#[tokio::test]
async fn serve_stops_naming_the_flag_when_the_store_cannot_be_used() {
    let bad = temp_dir("not-a-dir").join("file");
    std::fs::write(&bad, "").unwrap();
    let cases: [(Vec<String>, &str); 4] = [
        // Nothing listens on port 1.
        (
            vec!["--share-store".into(), "postgres://peregrine@127.0.0.1:1/shares".into()],
            "--share-store: cannot reach postgres://peregrine@127.0.0.1:1/shares",
        ),
        (vec!["--share-store".into(), format!("sqlite:{}/shares.sqlite3", bad.display())], "--share-store: cannot create"),
        (vec!["--data-dir".into(), bad.display().to_string()], "--data-dir: cannot create"),
        (vec!["--share-rate".into(), "lots".into()], "--share-rate"),
    ];
    for (flags, said) in cases {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        common::assert_refused_before_binding(&flags, said);
    }
}
