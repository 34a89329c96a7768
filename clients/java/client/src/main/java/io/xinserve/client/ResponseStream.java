package io.xinserve.client;

import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.Status;
import io.xinserve.client.errors.CancelledException;
import io.xinserve.client.errors.ErrorDetails;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.client.errors.XinserveExceptions;
import java.lang.ref.Cleaner;
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * A server stream read as a blocking {@link Iterator}; {@link #close()} cancels the call.
 *
 * <p>Always use it in try-with-resources:
 *
 * <pre>{@code
 * try (ResponseStream<GenerateStreamResponse> s = client.generateStream(request)) {
 *   for (GenerateStreamResponse delta : s) { System.out.print(delta.getText()); }
 * }
 * }</pre>
 *
 * Leaving the loop early (break, exception) and closing the stream cancels the gRPC call, which
 * aborts the engine request on the server. Unlike grpc-java's blocking iterator, the stream holds
 * at most {@code prefetch} messages: the next ones are requested from the server only as the
 * iterator is consumed (flow control), so an abandoned stream does not keep buffering. A stream
 * that becomes unreachable without being closed is cancelled when it is garbage-collected, as a
 * last resort: nothing gRPC holds (the call's listener, the idle timer) refers back to the stream.
 * With an idle timeout ({@link XinserveClient.Builder#streamIdleTimeout}) a stream that receives no
 * message for that long is cancelled and fails with {@link
 * io.xinserve.client.errors.DeadlineExceededException}.
 *
 * <p>{@link #hasNext()} and {@link #next()} block until a message, the end of the stream or a
 * failure arrives; a failure is thrown as a {@link XinserveException} subclass (e.g. {@link
 * io.xinserve.client.errors.DeadlineExceededException}). Not thread-safe: read from one thread;
 * {@link #close()} may be called from any thread.
 *
 * @param <T> the response message type
 */
public final class ResponseStream<T> implements Iterator<T>, Iterable<T>, AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();
  private static final Object END = new Object();
  private static final ScheduledExecutorService TIMER = newTimer();

  private final ClientCall<?, T> call;
  private final String requestId;
  private final Inbox<T> inbox;
  private final Cleaner.Cleanable cleanable;
  private volatile boolean closedByCaller;
  private final int refill;
  private int consumedSinceRequest;
  private Object next;
  private boolean done;
  private boolean delivered;

  private static final class Failure {
    final Status status;
    final Metadata trailers;

    Failure(Status status, Metadata trailers) {
      this.status = status;
      this.trailers = trailers;
    }
  }

  /**
   * The call's listener and the stream's buffer. A static class on purpose: the gRPC call (and so
   * the transport) holds the listener, and the listener must not hold the {@link ResponseStream},
   * or an abandoned stream could never become unreachable and be cancelled by the {@link Cleaner}.
   */
  private static final class Inbox<T> extends ClientCall.Listener<T> implements Runnable {
    final LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();
    final AtomicBoolean finished = new AtomicBoolean();
    final ClientCall<?, T> call;
    final long idleNanos;
    volatile long lastMessageNanos = System.nanoTime();
    volatile ScheduledFuture<?> idleCheck;

    Inbox(ClientCall<?, T> call, Duration idleTimeout) {
      this.call = call;
      this.idleNanos = idleTimeout == null ? 0 : idleTimeout.toNanos();
    }

    @Override
    public void onMessage(T message) {
      lastMessageNanos = System.nanoTime();
      queue.add(message);
    }

    @Override
    public void onClose(Status status, Metadata trailers) {
      if (finished.compareAndSet(false, true)) {
        queue.add(status.isOk() ? END : new Failure(status, trailers));
      }
      stopIdleCheck();
    }

    void scheduleIdleCheck(long delayNanos) {
      if (idleNanos > 0 && !finished.get()) {
        idleCheck = TIMER.schedule(this, delayNanos, TimeUnit.NANOSECONDS);
      }
    }

    void stopIdleCheck() {
      ScheduledFuture<?> f = idleCheck;
      if (f != null) {
        f.cancel(false);
      }
    }

    /** The idle check: cancels the call if no message arrived for the idle timeout. */
    @Override
    public void run() {
      if (finished.get()) {
        return;
      }
      long idle = System.nanoTime() - lastMessageNanos;
      if (idle < idleNanos) {
        scheduleIdleCheck(idleNanos - idle);
        return;
      }
      if (finished.compareAndSet(false, true)) {
        Duration d = Duration.ofNanos(idleNanos);
        queue.add(
            new Failure(
                Status.DEADLINE_EXCEEDED.withDescription(
                    "stream idle timeout: no message for " + d.toMillis() + " ms"),
                null));
        call.cancel("stream idle timeout", null);
      }
    }

    /** Cancels the call if it has not ended; used by close() and by the Cleaner. */
    void cancel(String why) {
      stopIdleCheck();
      if (finished.compareAndSet(false, true)) {
        call.cancel(why, null);
      }
    }
  }

  /** The Cleaner's action: refers to the inbox (and so the call), never to the stream. */
  private static final class Canceller implements Runnable {
    private final Inbox<?> inbox;

    Canceller(Inbox<?> inbox) {
      this.inbox = inbox;
    }

    @Override
    public void run() {
      inbox.cancel("ResponseStream closed or unreachable");
    }
  }

  <Q> ResponseStream(
      ClientCall<Q, T> call, Q request, String requestId, int prefetch, Duration idleTimeout) {
    this.call = call;
    this.requestId = requestId;
    this.refill = Math.max(1, prefetch / 2);
    this.inbox = new Inbox<>(call, idleTimeout);
    call.start(inbox, new Metadata());
    try {
      call.sendMessage(request);
      call.halfClose();
      call.request(Math.max(1, prefetch));
    } catch (RuntimeException e) {
      call.cancel("failed to send the request", e);
      throw e;
    }
    this.cleanable = CLEANER.register(this, new Canceller(inbox));
    inbox.scheduleIdleCheck(inbox.idleNanos);
  }

  private static ScheduledExecutorService newTimer() {
    ScheduledThreadPoolExecutor t =
        new ScheduledThreadPoolExecutor(
            1,
            r -> {
              Thread th = new Thread(r, "xinserve-stream-idle-timer");
              th.setDaemon(true);
              return th;
            });
    t.setRemoveOnCancelPolicy(true);
    return t;
  }

  /**
   * @return the request id of this call (the request's {@code request_id}, or the {@code
   *     x-request-id} the client generated); pass it to {@link XinserveClient#abort} to abort the
   *     request from elsewhere
   */
  public String requestId() {
    return requestId;
  }

  /**
   * Waits for the next message or the end of the stream.
   *
   * @return {@code true} if {@link #next()} will return a message
   * @throws XinserveException if the call failed (deadline, idle timeout, server error,
   *     cancellation by someone other than this stream's {@link #close()}, an Abort); its {@link
   *     XinserveException#requestId()} is this stream's
   */
  @Override
  public boolean hasNext() {
    if (closedByCaller) {
      done = true;
      next = null;
      return false;
    }
    if (next != null) {
      return true;
    }
    if (done) {
      return false;
    }
    Object item;
    try {
      item = inbox.queue.take();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      close();
      throw new CancelledException(
          new ErrorDetails(
              Status.Code.CANCELLED, "interrupted while waiting for the stream", null, null, null,
              null, null, requestId),
          e);
    }
    if (item == END) {
      done = true;
      cleanable.clean();
      return false;
    }
    if (item instanceof Failure f) {
      done = true;
      cleanable.clean();
      if (closedByCaller) {
        return false;
      }
      throw XinserveExceptions.ofStream(f.status, f.trailers, requestId, delivered);
    }
    next = item;
    delivered = true;
    // keep up to `prefetch` messages in flight, asking for more in batches (fewer thread hops)
    if (++consumedSinceRequest >= refill) {
      call.request(consumedSinceRequest);
      consumedSinceRequest = 0;
    }
    return true;
  }

  /**
   * @return the next message
   * @throws NoSuchElementException if the stream has ended
   * @throws XinserveException if the call failed
   */
  @Override
  @SuppressWarnings("unchecked")
  public T next() {
    if (!hasNext()) {
      throw new NoSuchElementException("stream has ended");
    }
    T t = (T) next;
    next = null;
    return t;
  }

  /** @return this stream, so it can be used in a for-each loop (once) */
  @Override
  public Iterator<T> iterator() {
    return this;
  }

  /**
   * A sequential {@link Stream} over the remaining messages; closing the {@code Stream} closes this
   * {@code ResponseStream} and so cancels the call if it is still running.
   *
   * @return the stream view
   */
  public Stream<T> stream() {
    return StreamSupport.stream(
            Spliterators.spliteratorUnknownSize(this, Spliterator.ORDERED | Spliterator.NONNULL),
            false)
        .onClose(this::close);
  }

  /** @return whether the call has ended (completed, failed or cancelled) */
  public boolean isFinished() {
    return inbox.finished.get();
  }

  /**
   * Cancels the call if it is still running (the server aborts the engine request) and discards
   * what is buffered. Idempotent, callable from any thread.
   */
  @Override
  public void close() {
    closedByCaller = true;
    cleanable.clean();
  }
}
