package io.xinserve.client;

/**
 * A running call started in the callback style: cancel it, or read its request id (to {@link
 * XinserveClient#abort} it from elsewhere, or to find its record in the server's audit log).
 */
public interface CallHandle extends Cancellable {
  /**
   * @return the call's {@code x-request-id}: the request's {@code request_id}, or the id the client
   *     generated
   */
  String requestId();
}
