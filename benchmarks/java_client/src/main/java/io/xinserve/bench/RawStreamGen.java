package io.xinserve.bench;

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.Descriptors.MethodDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import io.grpc.CallOptions;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.protobuf.ProtoUtils;
import io.grpc.stub.ClientCalls;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Closed-loop load generator for any server-streaming gRPC method, with messages described by a
 * protoset: the same grpc-java code ({@code ClientCalls.blockingServerStreamingCall}, one plaintext
 * channel, {@code DynamicMessage}, a 600 s deadline per call) against xinserve's {@code
 * InferenceService.GenerateStream} and vLLM's {@code VllmEngine.Generate}, driven over stdin by
 * benchmarks/serving_throughput.py (its {@code raw} client rows).
 *
 * <p>Usage: {@code java -cp java-client-bench.jar io.xinserve.bench.RawStreamGen TARGET PROTOSET
 * METHOD REQUESTS_FILE TOKENS_PATH UNIQUE_FIELD MAX_TOKENS}. PROTOSET is a serialized {@code
 * FileDescriptorSet} holding METHOD's file and its imports (each after its imports); METHOD is
 * {@code package.Service/Method}; REQUESTS_FILE holds one base64 serialized request per line
 * (request {@code i} is line {@code i % count}); TOKENS_PATH names the repeated field counted as
 * tokens in each response, dotted through singular message fields ({@code token_ids}, {@code
 * chunk.token_ids}); UNIQUE_FIELD, unless {@code -}, is a string field of the request set to
 * {@code bench-<n>} (a fresh n per request).
 *
 * <p>Protocol as {@link LoadGen}: {@code READY}, then per stdin line {@code N TOTAL} one JSON line
 * {@code {"tokens":int,"wall_s":float,"ttft_s":[float...],"errors":[str...]}}; a stream whose
 * token count differs from MAX_TOKENS is an error.
 */
public final class RawStreamGen {
  private RawStreamGen() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: RawStreamGen TARGET PROTOSET METHOD REQUESTS_FILE TOKENS_PATH"
          + " UNIQUE_FIELD MAX_TOKENS");
      System.exit(2);
    }
    FileDescriptorSet set = FileDescriptorSet.parseFrom(Files.readAllBytes(Path.of(args[1])));
    Map<String, FileDescriptor> files = new HashMap<>();
    for (FileDescriptorProto p : set.getFileList()) {
      List<FileDescriptor> deps = new ArrayList<>();
      for (String d : p.getDependencyList()) {
        deps.add(files.get(d));
      }
      files.put(p.getName(), FileDescriptor.buildFrom(p, deps.toArray(new FileDescriptor[0])));
    }
    String[] method = args[2].split("/");
    MethodDescriptor md = null;
    for (FileDescriptor f : files.values()) {
      for (ServiceDescriptor s : f.getServices()) {
        if (s.getFullName().equals(method[0])) {
          md = s.findMethodByName(method[1]);
        }
      }
    }
    if (md == null) {
      throw new IllegalArgumentException("no method " + args[2] + " in " + args[1]);
    }
    Descriptor in = md.getInputType();
    Descriptor out = md.getOutputType();
    List<DynamicMessage> requests = new ArrayList<>();
    for (String line : Files.readAllLines(Path.of(args[3]), StandardCharsets.US_ASCII)) {
      if (!line.isBlank()) {
        requests.add(DynamicMessage.parseFrom(in, Base64.getDecoder().decode(line.trim())));
      }
    }
    List<FieldDescriptor> path = new ArrayList<>();
    Descriptor at = out;
    for (String name : args[4].split("\\.")) {
      FieldDescriptor f = at.findFieldByName(name);
      if (f == null) {
        throw new IllegalArgumentException("no field " + name + " in " + at.getFullName());
      }
      path.add(f);
      at = f.getJavaType() == FieldDescriptor.JavaType.MESSAGE ? f.getMessageType() : null;
    }
    FieldDescriptor unique = "-".equals(args[5]) ? null : in.findFieldByName(args[5]);
    int maxTokens = Integer.parseInt(args[6]);
    io.grpc.MethodDescriptor<DynamicMessage, DynamicMessage> call =
        io.grpc.MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
            .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
            .setFullMethodName(args[2])
            .setRequestMarshaller(ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(in)))
            .setResponseMarshaller(ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(out)))
            .build();
    ManagedChannel channel =
        Grpc.newChannelBuilder(args[0], InsecureChannelCredentials.create()).build();
    AtomicLong seq = new AtomicLong();
    try (BufferedReader stdin = new BufferedReader(
        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      System.out.println("READY");
      System.out.flush();
      String line;
      while ((line = stdin.readLine()) != null) {
        String[] f = line.trim().split("\\s+");
        if (f.length != 2) {
          continue;
        }
        int workers = Integer.parseInt(f[0]);
        int total = Integer.parseInt(f[1]);
        System.out.println(run(workers, total, i -> {
          DynamicMessage r = requests.get(i % requests.size());
          if (unique != null) {
            r = r.toBuilder().setField(unique, "bench-" + seq.getAndIncrement()).build();
          }
          Iterator<DynamicMessage> it =
              ClientCalls.blockingServerStreamingCall(
                  channel, call, CallOptions.DEFAULT.withDeadlineAfter(600, TimeUnit.SECONDS), r);
          return new Iterator<Integer>() {
            @Override
            public boolean hasNext() {
              return it.hasNext();
            }

            @Override
            public Integer next() {
              return count(it.next(), path);
            }
          };
        }, maxTokens));
        System.out.flush();
      }
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  private static int count(Message m, List<FieldDescriptor> path) {
    Message at = m;
    for (int k = 0; k < path.size() - 1; k++) {
      FieldDescriptor f = path.get(k);
      if (!at.hasField(f)) {
        return 0;
      }
      at = (Message) at.getField(f);
    }
    return at.getRepeatedFieldCount(path.get(path.size() - 1));
  }

  interface Stream {
    Iterator<Integer> open(int i);
  }

  static String run(int workers, int total, Stream stream, int maxTokens)
      throws InterruptedException {
    AtomicInteger next = new AtomicInteger();
    AtomicLong tokens = new AtomicLong();
    double[] ttft = new double[total];
    List<String> errors = new ArrayList<>();
    List<Thread> threads = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int w = 0; w < workers; w++) {
      Thread t = new Thread(() -> {
        int i;
        while ((i = next.getAndIncrement()) < total) {
          long sent = System.nanoTime();
          long first = 0;
          int got = 0;
          try {
            Iterator<Integer> it = stream.open(i);
            while (it.hasNext()) {
              int n = it.next();
              if (n > 0 && first == 0) {
                first = System.nanoTime();
              }
              got += n;
            }
            if (got != maxTokens) {
              throw new IllegalStateException("got " + got + " tokens, expected " + maxTokens);
            }
            tokens.addAndGet(got);
            ttft[i] = (first - sent) / 1e9;
          } catch (Throwable e) {
            ttft[i] = -1;
            synchronized (errors) {
              errors.add(e.getClass().getSimpleName() + ": " + e.getMessage());
            }
          }
        }
      });
      t.setDaemon(true);
      t.start();
      threads.add(t);
    }
    for (Thread t : threads) {
      t.join();
    }
    return LoadGen.result(tokens.get(), (System.nanoTime() - t0) / 1e9, ttft, errors);
  }
}
