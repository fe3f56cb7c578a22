// For hosts that cannot send headers (e.g. GitHub Pages): this service worker re-serves the
// page's own files with the two headers that make it cross-origin isolated, which the rank
// threads (SharedArrayBuffer) need. web/shell.html registers it when the page is not isolated.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.cache === "only-if-cached" && request.mode !== "same-origin") return;
  event.respondWith(
    fetch(request).then((response) => {
      if (response.status === 0) return response;
      const headers = new Headers(response.headers);
      headers.set("Cross-Origin-Opener-Policy", "same-origin");
      headers.set("Cross-Origin-Embedder-Policy", "require-corp");
      headers.set("Cross-Origin-Resource-Policy", "same-origin");
      return new Response(response.body, {status: response.status,
                                          statusText: response.statusText, headers});
    }));
});
