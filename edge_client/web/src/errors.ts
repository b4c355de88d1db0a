/**
 * The web client's one error tree. Refusals from the coordinator arrive as Connect's `ConnectError`
 * (a gRPC code and its message); what the client itself finds wrong is a `WebClientError`:
 *
 *   WebClientError
 *   ├── ProtocolError     the coordinator sent something inconsistent (digest, length, model id, framing)
 *   ├── DataError         the local data does not fit the model
 *   ├── CodecError        a vector the codec cannot encode (e.g. beyond fp16's range)
 *   ├── TrainingError     training produced non-finite parameters
 *   └── UnsupportedError  the task needs something this client does not implement
 */
export class WebClientError extends Error {
  override readonly name: string = "WebClientError";
}
export class ProtocolError extends WebClientError {
  override readonly name = "ProtocolError";
}
export class DataError extends WebClientError {
  override readonly name = "DataError";
}
export class CodecError extends WebClientError {
  override readonly name = "CodecError";
}
export class TrainingError extends WebClientError {
  override readonly name = "TrainingError";
}
export class UnsupportedError extends WebClientError {
  override readonly name = "UnsupportedError";
}
