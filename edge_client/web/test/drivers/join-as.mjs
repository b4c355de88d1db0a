// Joins once with TOKEN naming CLIENT_ID (empty: none) and prints {code, message} of the answer (code "ok" on success):
//   node test/drivers/join-as.mjs URL TOKEN CLIENT_ID
import { ConnectError, Code } from "@connectrpc/connect";
import { CAPABILITIES } from "../../dist/lib/device.js";
import { connect } from "../../dist/lib/transport.js";

const [url, token, clientId] = process.argv.slice(2);
try {
  const reply = await connect(url, token).join({ deviceName: "probe", credential: "", clientId: clientId ?? "",
                                                 capabilities: { ...CAPABILITIES } });
  process.stdout.write(`${JSON.stringify({ code: "ok", message: reply.clientId })}\n`);
} catch (e) {
  if (!(e instanceof ConnectError)) throw e;
  process.stdout.write(`${JSON.stringify({ code: Code[e.code], message: e.rawMessage })}\n`);
}
