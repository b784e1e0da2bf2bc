// Page render times of the console in Debian's Chromium (headless, puppeteer-core from
// tests/clients/node_modules): for each route, the milliseconds from navigation to the page
// having drawn its data (body[data-loaded]), over --loads loads; one JSON line per route.
//
// usage: NODE_PATH=tests/clients/node_modules node benches/console_render.js URL LOADS ROUTE...
"use strict";

const puppeteer = require("puppeteer-core");

async function main() {
  const [base, loadsText, ...routes] = process.argv.slice(2);
  const loads = Number(loadsText);
  const browser = await puppeteer.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  for (const route of routes) {
    const times = [];
    for (let i = 0; i < loads; i++) {
      const started = Date.now();
      await page.goto(`${base}/?load=${i}#/${route}`, { waitUntil: "load" });
      await page.waitForFunction(() => document.body.dataset.loaded, { timeout: 30000 });
      times.push(Date.now() - started);
    }
    times.sort((a, b) => a - b);
    console.log(JSON.stringify({
      route: "/" + route,
      loads,
      render_ms_p50: times[Math.floor(times.length / 2)],
      render_ms_max: times[times.length - 1],
    }));
  }
  await browser.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
