// Preloaded (node --import) into an MCP server written elsewhere that
// contrib/mcp's tests start, without changing a line of it: a server that
// listens on a port without naming a host listens on 127.0.0.1 only, and
// says on stderr which port it got ("retrace-loopback-port 41234"), so that
// PORT=0 can be used.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  if ((typeof port === "number" || typeof port === "string") && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  this.once("listening", () => {
    const addr = this.address();
    if (addr && typeof addr === "object") {
      process.stderr.write(`retrace-loopback-port ${addr.port}\n`);
    }
  });
  return listen.apply(this, args);
};
