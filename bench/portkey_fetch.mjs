// Loaded into Portkey's gateway by bench/overhead.py (node --import): fetch's responses get headers
// that may be changed. Portkey 1.15.2 appends its x-portkey-* headers to the upstream's response,
// whose headers fetch makes immutable; with @hono/node-server's Response in between every streamed
// chat request fails with "TypeError: immutable" (Portkey-AI/gateway issues 1389 and 1550; the fix
// proposed there, PR 1551, copies the response the same way).
const upstreamFetch = globalThis.fetch;
const FetchResponse = globalThis.Response;
globalThis.fetch = async (...args) => {
  const response = await upstreamFetch(...args);
  return new FetchResponse(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers: new Headers(response.headers),
  });
};
