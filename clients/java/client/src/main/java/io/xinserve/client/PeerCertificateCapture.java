package io.xinserve.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.security.cert.Certificate;
import java.security.cert.X509Certificate;
import java.util.concurrent.atomic.AtomicReference;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.SSLSession;

/**
 * Records the server's leaf certificate of the TLS session one call ran on ({@link
 * Grpc#TRANSPORT_ATTR_SSL_SESSION} of the call's attributes, read when the response headers or the
 * close arrive). Stays empty over plaintext and in-process transports.
 */
final class PeerCertificateCapture implements ClientInterceptor {
  private final AtomicReference<X509Certificate> certificate = new AtomicReference<>();

  X509Certificate certificate() {
    return certificate.get();
  }

  private void capture(ClientCall<?, ?> call) {
    SSLSession session = call.getAttributes().get(Grpc.TRANSPORT_ATTR_SSL_SESSION);
    if (session == null) {
      return;
    }
    try {
      Certificate[] chain = session.getPeerCertificates();
      if (chain.length > 0 && chain[0] instanceof X509Certificate leaf) {
        certificate.compareAndSet(null, leaf);
      }
    } catch (SSLPeerUnverifiedException e) {
      // no verified peer: nothing to bind to
    }
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
    ClientCall<Q, R> call = next.newCall(method, options);
    return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(call) {
      @Override
      public void start(Listener<R> listener, Metadata headers) {
        super.start(
            new ForwardingClientCallListener.SimpleForwardingClientCallListener<R>(listener) {
              @Override
              public void onHeaders(Metadata responseHeaders) {
                capture(call);
                super.onHeaders(responseHeaders);
              }

              @Override
              public void onClose(Status status, Metadata trailers) {
                capture(call);
                super.onClose(status, trailers);
              }
            },
            headers);
      }
    };
  }
}
