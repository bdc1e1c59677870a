// The local Cosmos DB server (npm @vercel/cosmosdb-server) on the port and host given
// (`node cosmos_server.js PORT HOST`; port 0: one the OS picks), with one fix. Its point read
// of an absent item checks the item's partition key before looking whether it exists and
// crashes (500), where the service answers 404; a request that says it may cross partitions
// skips that check, so point reads are marked so before the server sees them. Prints the
// address it listens at, as the package's own command does.
"use strict";
const { createHttpsServer } = require("@vercel/cosmosdb-server");

const POINT_READ = /^\/dbs\/[^/]+\/colls\/[^/]+\/docs\/[^/]+\/?$/;
const port = parseInt(process.argv[2] || "0", 10);
const host = process.argv[3] || "127.0.0.1";

const server = createHttpsServer();
server.prependListener("request", (req) => {
  const path = (req.url || "").split("?")[0];
  if (req.method === "GET" && POINT_READ.test(path)) {
    req.headers["x-ms-documentdb-query-enablecrosspartition"] = "true";
  }
});
server.listen(port, host, () => {
  const address = server.address();
  console.log(`Ready to accept HTTPS connections at ${address.address}:${address.port}`);
});
