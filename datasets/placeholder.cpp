// placeholder until datasets land
