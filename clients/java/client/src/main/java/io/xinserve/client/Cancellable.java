package io.xinserve.client;

/** A handle on a running call that can be cancelled. Cancelling aborts the server's engine request. */
@FunctionalInterface
public interface Cancellable {
  /**
   * Cancels the call. Idempotent; does nothing if the call already finished. The server is told at
   * once (an HTTP/2 RST_STREAM) and aborts the engine request.
   */
  void cancel();
}
