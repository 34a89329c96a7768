package io.xinserve.client;

import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.xinserve.v1.InferenceServiceGrpc;
import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/** An in-process server around a fake servicer that records headers and attempts per method. */
final class FakeServer implements AutoCloseable {
  final String name = InProcessServerBuilder.generateName();
  final LinkedBlockingQueue<Metadata> headers = new LinkedBlockingQueue<>();
  final Map<String, AtomicInteger> attempts = new ConcurrentHashMap<>();
  /** Calls the server saw cancelled (also those cancelled before their handler ran). */
  final java.util.concurrent.Semaphore cancels = new java.util.concurrent.Semaphore(0);
  final Server server;

  FakeServer(InferenceServiceGrpc.InferenceServiceImplBase service) throws IOException {
    ServerInterceptor recorder =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata md, ServerCallHandler<Q, R> next) {
            headers.add(md);
            attempts
                .computeIfAbsent(call.getMethodDescriptor().getBareMethodName(), k -> new AtomicInteger())
                .incrementAndGet();
            return new io.grpc.ForwardingServerCallListener.SimpleForwardingServerCallListener<Q>(
                next.startCall(call, md)) {
              @Override
              public void onCancel() {
                cancels.release();
                super.onCancel();
              }
            };
          }
        };
    server =
        InProcessServerBuilder.forName(name)
            .addService(ServerInterceptors.intercept(service, recorder))
            .build()
            .start();
  }

  int attempts(String method) {
    AtomicInteger n = attempts.get(method);
    return n == null ? 0 : n.get();
  }

  Metadata lastHeaders() throws InterruptedException {
    Metadata md = null;
    Metadata m;
    while ((m = headers.poll(50, TimeUnit.MILLISECONDS)) != null) {
      md = m;
    }
    return md;
  }

  ManagedChannelBuilder<?> channelBuilder() {
    return InProcessChannelBuilder.forName(name);
  }

  XinserveClient.Builder client() {
    return XinserveClient.builder().channelBuilder(channelBuilder());
  }

  @Override
  public void close() throws InterruptedException {
    server.shutdownNow();
    server.awaitTermination(5, TimeUnit.SECONDS);
  }
}
