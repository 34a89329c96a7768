package io.xinserve.client;

import io.xinserve.client.errors.XinserveException;

/**
 * Callback-style receiver of a streamed response. Methods are called on a gRPC executor thread,
 * one at a time and in order; the next message is requested from the server only after {@link
 * #onNext} returns, so a slow listener slows the stream down instead of buffering without bound.
 *
 * <p>Exactly one of {@link #onCompleted()} and {@link #onError} ends the stream. If {@code onNext}
 * throws, the call is cancelled and {@code onError} receives a {@link
 * io.xinserve.client.errors.CancelledException} whose cause is what was thrown.
 *
 * @param <T> the response message type
 */
public interface StreamListener<T> {
  /**
   * One streamed message (for generation: one delta of new tokens).
   *
   * @param message the message
   */
  void onNext(T message);

  /** The stream ended normally; no more calls follow. */
  default void onCompleted() {}

  /**
   * The stream failed or was cancelled (also after {@link Cancellable#cancel()}, with a {@link
   * io.xinserve.client.errors.CancelledException}); no more calls follow.
   *
   * @param error the typed failure
   */
  default void onError(XinserveException error) {}
}
